"""The command line: ``kv-size`` and ``simulate``, run in-process, as tables and as JSON."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig

from pagedkv_edu.cli import main
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.specs import get_spec
from pagedkv_edu.workload import copilot50

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@functools.cache
def _json_output(argv: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    assert code == 0, argv
    return out.getvalue()


def run_json(*argv: str) -> dict:
    """The parsed --json output; each command line runs once per session (simulations take a while)."""
    return json.loads(_json_output(argv))


# --- kv-size ------------------------------------------------------------------------------------
def test_kv_size_llama_3_2_1b_is_32_kib_per_token() -> None:
    out = run_json("kv-size", "--model", "llama-3.2-1b")
    spec = get_spec("llama-3.2-1b")
    assert out["kv_bytes_per_token"] == 32768
    assert (out["model"], out["dtype"], out["num_layers"], out["num_kv_heads"], out["head_dim"]) == \
        ("llama-3.2-1b", "bf16", 16, 8, 64)
    assert out["tokens"] == 2048 and out["requests"] == 1
    assert out["kv_bytes_total"] == 2048 * 32768
    assert out["weight_bytes"] == spec.weight_bytes


def test_kv_size_llama_2_7b_request_is_hundreds_of_mb_next_to_14_gb_of_weights() -> None:
    out = run_json("kv-size", "--model", "llama-2-7b", "--tokens", "825", "--requests", "50")
    spec = get_spec("llama-2-7b")
    per_request = out["kv_bytes_total"] // 50
    assert per_request == spec.kv_bytes(825) == 825 * out["kv_bytes_per_token"]
    assert 100e6 < per_request < 1e9
    assert out["weight_bytes"] == pytest.approx(14e9, rel=0.05)
    assert out["kv_bytes_total"] > out["weight_bytes"]


def test_kv_size_dtype_override() -> None:
    bf16 = run_json("kv-size", "--model", "smollm2-135m")
    fp8 = run_json("kv-size", "--model", "smollm2-135m", "--dtype", "fp8")
    fp32 = run_json("kv-size", "--model", "smollm2-135m", "--dtype", "fp32")
    assert bf16["kv_bytes_per_token"] == get_spec("smollm2-135m").kv_bytes_per_token
    assert fp8["kv_bytes_per_token"] * 2 == bf16["kv_bytes_per_token"] == fp32["kv_bytes_per_token"] // 2
    assert fp32["dtype"] == "fp32"


def test_kv_size_table_shows_the_arithmetic(capsys) -> None:
    code, out, _ = run(capsys, "kv-size", "--model", "llama-3.2-1b", "--tokens", "1000", "--requests", "4")
    assert code == 0
    assert "16 layers x 8 KV heads x 64 dims x 2 (K,V) x 2 B = 32,768 B (32 KiB)" in out
    assert "1,000 tokens" in out and "4 requests" in out
    assert not out.lstrip().startswith("{")


def test_kv_size_from_a_transformers_config_json(tmp_path) -> None:
    config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         max_position_embeddings=131072)
    path = tmp_path / "config.json"
    config.to_json_file(path)
    out = run_json("kv-size", "--model", str(path))
    named = run_json("kv-size", "--model", "llama-3.2-1b")
    assert out["model"] == str(path)
    for key in ("kv_bytes_per_token", "kv_bytes_total", "weight_bytes", "dtype"):
        assert out[key] == named[key], key


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt-9"], "unknown model 'gpt-9'"),
    (["--model", "/nonexistent/config.json"], "/nonexistent/config.json: no such file"),
])
def test_kv_size_errors_exit_2_with_the_bad_value(capsys, argv, message) -> None:
    code, out, err = run(capsys, "kv-size", *argv, "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err


# --- simulate ------------------------------------------------------------------------------------
def test_simulate_paged_json() -> None:
    out = run_json("simulate", "--policy", "paged")
    assert (out["policy"], out["block_size"], out["reserve"]) == ("paged", 16, None)
    assert out["capacity_tokens"] == 10 * 2048
    assert out["utilisation"] >= 0.96
    assert out["waste"]["external"] == 0 and out["waste"]["over_reserved"] == 0
    assert out["utilisation"] + sum(out["waste"].values()) == pytest.approx(1.0, abs=1e-3)


def test_simulate_contiguous_against_paged() -> None:
    contiguous = run_json("simulate", "--policy", "contiguous")
    paged = run_json("simulate", "--policy", "paged")
    assert contiguous["policy"] == "contiguous" and contiguous["reserve"] == "max"
    assert contiguous["peak_concurrency"] == contiguous["capacity_tokens"] // 2048
    assert paged["peak_concurrency"] > contiguous["peak_concurrency"]
    assert paged["utilisation"] > contiguous["utilisation"]
    assert contiguous["waste"]["internal"] > 0 and contiguous["waste"]["over_reserved"] > 0


def test_simulate_options_reach_the_simulator() -> None:
    out = run_json("simulate", "--policy", "contiguous", "--reserve", "oracle", "--seed", "3",
                   "--kv-budget-tokens", "8192")
    expected = simulate(copilot50(3), "contiguous", 8192, reserve="oracle").summary()
    assert out == json.loads(json.dumps(expected))
    assert out["capacity_tokens"] == 8192


def test_simulate_prefix_caching_reports_hits(capsys) -> None:
    out = run_json("simulate", "--policy", "paged", "--prefix-caching")
    assert out["prefix_caching"]["hit_tokens"] == 49 * 192          # the system prompt's 12 full blocks
    assert out["prefix_caching"] == simulate(copilot50(0), enable_prefix_caching=True).summary()["prefix_caching"]
    code, table, _ = run(capsys, "simulate", "--policy", "paged", "--prefix-caching")
    assert code == 0 and "prefix cache     : 23.3% of 40,430 prompt tokens hit" in table
    code, _, err = run(capsys, "simulate", "--policy", "contiguous", "--prefix-caching", "--json")
    assert code == 2 and "needs policy='paged'" in err


def test_simulate_timeline_has_every_step() -> None:
    out = run_json("simulate", "--policy", "contiguous", "--reserve", "pow2", "--timeline")
    assert len(out["steps"]) == out["total_steps"] and len(out["requests"]) == 50
    for step in out["steps"]:
        parts = ("used", "over_reserved", "internal", "external", "free")
        assert sum(step[k] for k in parts) == out["capacity_tokens"]
    assert all(r["finish_step"] is not None for r in out["requests"])


def test_simulate_table(capsys) -> None:
    code, out, _ = run(capsys, "simulate", "--policy", "contiguous")
    assert code == 0
    for word in ("utilisation", "over_reserved", "internal", "external", "peak concurrency", "queueing delay"):
        assert word in out
    assert "reserve=max" in out
    assert not out.lstrip().startswith("{")


@pytest.mark.parametrize("argv, message", [
    (["--policy", "paged", "--block-size", "1", "--kv-budget-tokens", str(2**25)],
     "--kv-budget-tokens 33554432 at --block-size 1 is 33,554,432 blocks"),
    (["--policy", "contiguous", "--kv-budget-tokens", "2000"], "can never fit in a budget of 2000 tokens"),
    (["--policy", "paged", "--kv-budget-tokens", "8"], "kv_budget_tokens=8 is smaller than one block of 16"),
    (["--policy", "paged", "--block-size", "64", "--kv-budget-tokens", "32"], "smaller than one block of 64"),
])
def test_simulate_errors_exit_2_with_the_bad_value(capsys, argv, message) -> None:
    code, out, err = run(capsys, "simulate", *argv, "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err


@pytest.mark.parametrize("argv, bad", [
    (["simulate", "--policy", "lru"], "'lru'"),
    (["simulate", "--workload", "nope"], "'nope'"),
    (["kv-size", "--dtype", "int3"], "'int3'"),
    (["kv-size", "--tokens", "many"], "argument --tokens: must be a whole number in 0..1099511627776, got 'many'"),
    (["kv-size", "--tokens", "-1"], "argument --tokens: must be a whole number in 0..1099511627776, got -1"),
    (["kv-size", "--requests", "-2"], "argument --requests: must be a whole number in 0..1073741824, got -2"),
    (["simulate", "--kv-budget-tokens", "0"], "argument --kv-budget-tokens: must be a whole number in 1..33554432, got 0"),
    (["simulate", "--kv-budget-tokens", "-5"], "argument --kv-budget-tokens: must be a whole number in 1..33554432, got -5"),
    (["simulate", "--block-size", "0"], "argument --block-size: must be a whole number in 1..4096, got 0"),
    (["simulate", "--seed", "1e3"], "argument --seed: must be a whole number in 0..4294967295, got '1e3'"),
    (["frobnicate"], "'frobnicate'"),
    ([], "required"),
])
def test_usage_errors_exit_2_naming_the_value(capsys, argv, bad) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert bad in err and err.count("\n") == 1        # one line: the command, the flag, the value


def test_help_lists_the_commands(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "kv-size" in out and "simulate" in out


# --- no traceback, whatever the input (the outside tests' cases, through the real entry point) ----
def run_module(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("PAGEDKV_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", "pagedkv_edu", *argv], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_bad_input_through_python_m_is_one_line_naming_the_value(tmp_path) -> None:
    """Each case the outside tests found, and its neighbours; two through ``python -m``, the rest through main()."""
    huge = "9" * 400
    config = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, vocab_size=100)
    (tmp_path / "model.json").mkdir()
    cases = [
        (["kv-size", "--tokens", huge], "argument --tokens", "(400 characters)"),
        (["kv-size", "--model", write(tmp_path / "zero.json", json.dumps({**config, "num_attention_heads": 0}))],
         "num_attention_heads must be a whole number >= 1, got 0", "zero.json"),
        (["kv-size", "--model", write(tmp_path / "list.json", "[1, 2]")], "must be a JSON object", "got a list"),
        (["kv-size", "--model", str(tmp_path / "model.json")], "is a directory", "model.json"),
        (["kv-size", "--model", write(tmp_path / "bad.json", "{not json")], "not a readable JSON config", "bad.json"),
        (["kv-size", "--model", write(tmp_path / "half.json", '{"num_attention_heads": 4}')],
         "the config has no num_hidden_layers", "half.json"),
        (["kv-size", "--model", write(tmp_path / "true.json", json.dumps({**config, "num_attention_heads": True}))],
         "num_attention_heads must be a whole number >= 1, got True", "true.json"),
        (["simulate", "--kv-budget-tokens", "1000000000000"], "argument --kv-budget-tokens", "1000000000000"),
    ]
    for i, (argv, what, value) in enumerate(cases):
        if i in (0, 3):         # the real entry point (an interpreter start each: a few seconds)
            result = run_module(*argv)
            code, out, err = result.returncode, result.stdout, result.stderr
        else:
            out_buf, err_buf = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out_buf), contextlib.redirect_stderr(err_buf):
                try:
                    code = main(argv)
                except SystemExit as exit_:        # argparse refused a flag
                    code = exit_.code
            out, err = out_buf.getvalue(), err_buf.getvalue()
        assert code == 2 and out == "", argv
        assert "Traceback" not in err and err.count("\n") == 1, (argv, err)
        assert what in err and value in err, (argv, err)


def test_an_unexpected_failure_is_one_line_too(capsys, monkeypatch) -> None:
    monkeypatch.setattr("pagedkv_edu.cli.get_spec", lambda name: 1 / 0)
    code, out, err = run(capsys, "kv-size")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("error: unexpected ZeroDivisionError") and "PAGEDKV_TRACEBACK=1" in err


def test_generate_and_the_benchmarks_do_not_import_the_command_line() -> None:
    """``add_json_flag`` lives in a leaf module, so the engine never imports ``cli``."""
    import pagedkv_edu.cli as cli
    from pagedkv_edu import cli_args

    assert cli.add_json_flag is cli_args.add_json_flag
    for path in ("engine/generate.py", "bench/generate_cli.py", "bench/attention.py", "bench/decode.py",
                 "bench/serve.py"):
        assert "from .cli import" not in (ROOT / "pagedkv_edu" / path).read_text().replace("..cli import", ".cli import"), path
