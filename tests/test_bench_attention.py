"""``bench attention``: runs (on tiny shapes here), writes a record with the required metadata, plots it."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from pagedkv_edu import bench, runtime  # noqa: E402
from pagedkv_edu.bench import attention  # noqa: E402

REQUIRED = ("benchmark", "device", "backend", "date_utc", "python", "torch", "triton", "versions")
MEASUREMENTS = {"attention": ("rows",), "decode": ("rows",), "serve": ("runs", "arrivals"),   # what results/README.md lists
                "chunked-prefill": ("runs",), "widgets": ("widgets",)}


def tiny(shape: attention.Shape) -> attention.Shape:
    return replace(shape, batch=2, context=48, block_size=8, num_heads=4, num_kv_heads=2, head_dim=16, dtype="fp32")


@pytest.fixture
def tiny_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's own shapes take minutes in the interpreter; keep their labels, shrink them."""
    monkeypatch.setattr(attention, "CPU_SHAPES", (tiny(attention.CPU_SHAPES[0]),))
    monkeypatch.setattr(attention, "MAIN", tiny(attention.MAIN))  # the tile sweep's shape
    monkeypatch.setattr(attention, "GPU_SHAPES", tuple(tiny(s) for s in (attention.MAIN, attention.LONG_NO_SPLIT,
                                                                          attention.LONG_AUTO)))


def run_bench(*argv: str) -> dict:
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "attention", *argv])
    return args.func(args)


def test_bench_writes_a_record_with_the_required_metadata(tiny_shapes, tmp_path: Path, capsys) -> None:
    out = tmp_path / "results" / "attention-2026-01-01.json"
    result = run_bench("--out", str(out), "--no-sweep")
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record == json.loads(json.dumps(result, default=str))
    for field in REQUIRED:
        assert record[field], field
    assert record["benchmark"] == "attention" and record["backend"] == runtime.BACKEND
    row = record["rows"][0]
    assert row["kernel_ms"] > 0 and row["sdpa_ms"] > 0 and row["gather_ms"] > 0
    assert row["max_abs_diff_vs_sdpa"] < 1e-4, "the kernel and SDPA must have computed the same attention"
    assert row["kv_bytes"] == 2 * 2 * 48 * 2 * 16 * 4
    if runtime.BACKEND == "cuda":
        assert record["copy_gbps"] > 0 and {t["target"] for t in record["targets"]}
    else:
        assert "GPU figures (GB/s, fraction of copy bandwidth, speed against SDPA) need CUDA" in printed
        assert record["copy_gbps"] is None and row["fraction_of_copy_bw"] is None
    assert f"wrote {out}" in printed


@pytest.mark.skipif(runtime.BACKEND == "cuda", reason="on CUDA the test above runs the real GPU path")
def test_gpu_report_path_with_a_stand_in_timer(tiny_shapes, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The CUDA-only bookkeeping (copy bandwidth, targets, tile sweep, table) runs, timed on the CPU."""
    monkeypatch.setattr(runtime, "BACKEND", "cuda")  # only the report logic: tensors stay on the CPU
    monkeypatch.setattr(runtime, "device", lambda: torch.device("cpu"))
    monkeypatch.setattr(runtime, "device_name", lambda: "a stand-in GPU")

    def two_ms(fn) -> float:
        fn()
        return 2.0

    monkeypatch.setattr(attention, "_time_ms", two_ms)
    monkeypatch.setattr(attention, "TILE_SWEEP", ((32, 4, 3),))
    copy_bandwidth = attention.copy_bandwidth_gbps
    monkeypatch.setattr(attention, "copy_bandwidth_gbps", lambda: copy_bandwidth(1 << 20))  # 1 MiB, not 1 GiB
    record = run_bench()
    printed = capsys.readouterr().out
    assert record["copy_gbps"] > 0 and len(record["rows"]) == 3 and len(record["tile_sweep"]) == 1
    # Every call "takes" 2 ms: tiny K/V at 2 ms is far below copy bandwidth, equal to SDPA (1.0x >= 0.95x),
    # and split-K is no faster than no split.
    assert [t["met"] for t in record["targets"]] == [False, True, False]
    main = record["rows"][0]
    assert main["fraction_of_copy_bw"] == round(main["gbps"] / record["copy_gbps"], 3)
    assert "MISSED b64 x 4096: >= 80% of copy bandwidth" in printed and "tile sweep on 'target: b64 x 4096'" in printed


def _record(backend: str, date: str) -> dict:
    row = {"label": "target: b64 x 4096", "kernel_ms": 1.0, "gather_ms": 9.0, "sdpa_ms": 1.1, "gbps": 3500.0,
           "speed_vs_sdpa": 1.1, "fraction_of_copy_bw": 0.81}
    return {"benchmark": "attention", "backend": backend, "device": "a device", "date_utc": date,
            "torch": "2.11", "triton": "3.6", "copy_gbps": 4300.0 if backend == "cuda" else None, "rows": [row, row]}


@pytest.mark.parametrize("backend", ["cuda", "interpreter"])
def test_plot_record_draws_gpu_and_cpu_records(backend: str) -> None:
    fig = attention.plot_record(_record(backend, "2026-01-02T00:00:00Z"))
    assert len(fig.axes) == (2 if backend == "cuda" else 1)
    title = fig._suptitle.get_text()
    assert "a device, 2026-01-02" in title and ("not a GPU's" in title) == (backend != "cuda")


def test_latest_result_takes_the_newest_record_of_the_backend(tmp_path: Path) -> None:
    for name, backend, date in (("attention-2026-01-01.json", "cuda", "2026-01-01T00:00:00Z"),
                                ("attention-2026-02-01.json", "cuda", "2026-02-01T00:00:00Z"),
                                ("attention-2026-03-01.json", "interpreter", "2026-03-01T00:00:00Z")):
        bench.write_record(tmp_path / name, _record(backend, date))
    path, record = bench.latest_result("attention", directory=tmp_path)
    assert path.name == "attention-2026-02-01.json" and record["date_utc"].startswith("2026-02-01")
    assert bench.latest_result("decode", directory=tmp_path) is None


def test_no_gpu_result_is_committed_without_its_metadata() -> None:
    """Every committed record carries the fields results/README.md requires."""
    for path in bench.RESULTS_DIR.glob("*.json"):
        record = json.loads(path.read_text())
        missing = [f for f in REQUIRED if f not in record]
        measured = MEASUREMENTS.get(record.get("benchmark"), ("rows",))
        assert not missing and any(f in record for f in measured), f"{path.name} lacks {missing or measured}"
        assert path.name.startswith(record["benchmark"] + "-"), path.name


def tiny_step(shape: attention.StepShape) -> attention.StepShape:
    """The same kind of step, a few dozen tokens long, with GQA 2 and block 8."""
    lens = tuple(min(n, 24 + i) for i, n in enumerate(shape.seq_lens[:3]))
    q_lens = tuple(n if q == s else (1 if q == 1 else n // 2) for n, q, s in
                   zip(lens, shape.query_lens, shape.seq_lens))
    return replace(shape, seq_lens=lens, query_lens=q_lens, block_size=8, num_heads=4, num_kv_heads=2,
                   head_dim=16, dtype="fp32")


@pytest.mark.parametrize("stand_in_gpu", [False, True])
def test_prefill_mode_times_the_unified_kernel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys,
                                               stand_in_gpu: bool) -> None:
    if stand_in_gpu:
        if runtime.BACKEND == "cuda":
            pytest.skip("on CUDA the real GPU path runs")
        monkeypatch.setattr(runtime, "BACKEND", "cuda")  # only the report logic: tensors stay on the CPU
        monkeypatch.setattr(runtime, "device", lambda: torch.device("cpu"))
        monkeypatch.setattr(runtime, "device_name", lambda: "a stand-in GPU")
    monkeypatch.setattr(attention, "_time_ms", lambda fn: (fn(), 2.0)[1])  # one call each: the interpreter is slow
    shapes = tuple(tiny_step(s) for s in attention.PREFILL_GPU_SHAPES if s.kind != "prefill" or s.label ==
                   attention.PREFILL_MAIN.label)
    monkeypatch.setattr(attention, "PREFILL_GPU_SHAPES", shapes)
    monkeypatch.setattr(attention, "PREFILL_CPU_SHAPES", shapes)
    monkeypatch.setattr(attention, "PREFILL_MAIN", shapes[0])
    monkeypatch.setattr(attention, "DECODE_VIA_UNIFIED", next(s for s in shapes if s.kind == "decode"))
    out = tmp_path / "attention-prefill-2026-01-01.json"
    record = run_bench("--mode", "prefill", "--out", str(out))
    printed = capsys.readouterr().out
    assert json.loads(out.read_text())["benchmark"] == "attention-prefill"
    assert {r["kind"] for r in record["rows"]} == {"prefill", "decode", "mixed"}
    for row in record["rows"]:
        assert row["unified_ms"] > 0 and row["gather_ms"] > 0
        if "sdpa_ms" in row:
            assert row["max_abs_diff_vs_sdpa"] < 1e-4, row["label"]
    assert record["rows"][0]["dispatch"] == "triton-unified"
    decode = next(r for r in record["rows"] if r["kind"] == "decode")
    assert decode["dispatch"] == "triton-decode" and decode["decode_kernel_ms"] > 0
    if stand_in_gpu:  # every call "takes" 2 ms: as fast as SDPA, the decode kernel no slower
        assert [t["met"] for t in record["targets"]] == [True, True] and "MET  prefill 1 x 4096" in printed
    else:
        assert "GPU figures (TFLOP/s, speed against SDPA) need CUDA" in printed
