"""``python -m pagedkv_edu generate`` and ``bench decode``: their parsers, output and refusals."""

from __future__ import annotations

import argparse
import json

import pytest

from pagedkv_edu.bench import generate_cli as generate_module
from pagedkv_edu.bench import decode as bench_decode
from pagedkv_edu.engine.generate import blocks_for
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


@pytest.mark.parametrize("model, extra", [
    ("tiny-random", ["--prompt", "a", "--prompt", "a longer prompt"]),
    ("smollm2-135m", ["--prompt", "Paged attention", "--no-chat"]),
    pytest.param("llama-3.2-1b-random", ["--prompt", "Hi"], marks=pytest.mark.slow),
])
def test_generate_json_says_prefill_and_decode_ran_in_triton(model, extra, capsys):
    args = parse(generate_module.register, ["generate", "--model", model, "--backend", "triton",
                                            "--max-new-tokens", "2", "--json", *extra])
    out = args.func(args)
    assert capsys.readouterr().out == ""
    assert json.loads(json.dumps(out))["attention"] == {"prefill": "triton-unified", "decode": "triton-decode"}
    assert all(len(t) == 2 for t in out["token_ids"])


def test_generate_prints_which_kernels_ran(capsys):
    args = parse(generate_module.register, ["generate", "--model", "tiny-random", "--prompt", "a", "--max-new-tokens",
                                            "2"])
    out = args.func(args)
    assert out["attention"] == {"prefill": "torch-gather", "decode": "torch-gather"}
    assert "attention: prefill torch-gather, decode torch-gather" in capsys.readouterr().out


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


def test_bench_decode_through_triton_writes_a_record_the_chapter_reads(tmp_path, capsys):
    out = tmp_path / "decode-2026-12-01-tiny.json"
    args = parse(bench_decode.register, ["decode", "--model", "tiny-random", "--backend", "triton", "--devices", "cpu",
                                         "--prompts", "1", "--max-new-tokens", "3", "--out", str(out)])
    record = args.func(args)
    assert "s/step" in capsys.readouterr().out
    ours = record["rows"][0]
    assert ours["system"] == "pagedkv_edu paged (triton)" and ours["same_tokens_as_transformers"]
    assert ours["attention"] == {"prefill": "triton-unified", "decode": "triton-decode"}
    assert ours["decode_steps"] == 2 and ours["seconds_per_decode_step"] > 0
    saved = json.loads(out.read_text())
    assert {"device", "date_utc", "torch", "triton", "versions", "backend"} <= set(saved)
    found = bench_decode.latest_triton_records(tmp_path)
    assert list(found) == [("tiny-random", "interpreter")] and found[("tiny-random", "interpreter")][0] == out
    assert bench_decode.triton_row(saved) == saved["rows"][0]
    assert bench_decode.latest_triton_records(tmp_path / "none") == {}
