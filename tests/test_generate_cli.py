"""``python -m pagedkv_edu generate`` and ``bench decode``: their parsers, output and refusals."""

from __future__ import annotations

import argparse
import json

import pytest

from pagedkv_edu import generate as generate_module
from pagedkv_edu.bench import decode as bench_decode
from pagedkv_edu.generate import blocks_for
from pagedkv_edu.model import load_model


def parse(register, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_generate_streams_text_then_reports_speed_and_block_tables(capsys):
    args = parse(generate_module.register, ["generate", "--model", "smollm2-135m", "--prompt", "What is 2 + 2?",
                                            "--max-new-tokens", "12", "--block-size", "8", "--show-blocks"])
    out = args.func(args)
    printed = capsys.readouterr().out
    assert out["chat_template"] and out["completions"][0].strip()
    assert printed.startswith(out["completions"][0])           # streamed first, as it was generated
    assert "tokens/s" in printed and "logical  physical  filled" in printed
    table = out["block_tables"][0]
    assert table["num_tokens"] == out["prompt_tokens"][0] + len(out["token_ids"][0]) - 1
    assert len(table["block_ids"]) == -(-table["num_tokens"] // 8)


def test_generate_json_for_a_batch(capsys):
    args = parse(generate_module.register, ["generate", "--model", "tiny-random", "--prompt", "a", "--prompt",
                                            "a longer prompt", "--max-new-tokens", "3", "--json"])
    out = args.func(args)
    assert capsys.readouterr().out == ""                        # the CLI prints the JSON, not the command
    json.dumps(out)
    assert [len(t) for t in out["token_ids"]] == [3, 3] and len(out["block_tables"]) == 2
    assert not out["chat_template"]


@pytest.mark.parametrize("argv, error, message", [
    (["--model", "gpt-5"], KeyError, "known models"),
    (["--model", "tiny-random", "--num-blocks", "1", "--max-new-tokens", "40"], ValueError, "can never fit"),
])
def test_generate_refusals(argv, error, message):
    args = parse(generate_module.register, ["generate", *argv])
    with pytest.raises(error, match=message):
        args.func(args)


@pytest.mark.parametrize("flag, value", [("--max-new-tokens", "-1"), ("--num-blocks", "0"), ("--seed", "x"),
                                         ("--block-size", "9" * 400)])
def test_generate_flags_are_refused_by_name(capsys, flag, value):
    with pytest.raises(SystemExit):
        parse(generate_module.register, ["generate", "--model", "tiny-random", flag, value])
    assert f"argument {flag}: must be a whole number" in capsys.readouterr().err


def test_bench_decode_on_the_tiny_model(capsys):
    args = parse(bench_decode.register, ["decode", "--model", "tiny-random", "--prompts", "2",
                                         "--max-new-tokens", "3"])
    record = args.func(args)
    printed = capsys.readouterr().out
    rows = {r["system"]: r for r in record["rows"]}
    ours, theirs = rows["pagedkv_edu paged (torch)"], rows["transformers generate (DynamicCache, left-padded batch)"]
    assert ours["same_tokens_as_transformers"] and ours["useful_tokens"] == theirs["useful_tokens"] == 6
    # measured tensor bytes agree with the arithmetic: our pool holds whole blocks of 16 slots, transformers'
    # cache one padded row per prompt, as long as the longest prompt plus the two tokens fed back
    loaded = load_model("tiny-random")
    prompts = bench_decode.bench_prompts(loaded, 2)
    per_token = loaded.model.kv_bytes_per_token()
    assert ours["kv_cache_bytes"] == sum(blocks_for(prompts, 3, 16)) * 16 * per_token
    assert theirs["kv_cache_bytes"] == 2 * (max(len(p) for p in prompts) + 2) * per_token
    assert "tok/s" in printed
