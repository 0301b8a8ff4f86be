"""Reading the committed serve records (``bench.records``) and drawing them (``bench.record_plots``).

Chapter 6, part 2 prints these functions' text and shows their figures. They are checked here two ways: on
small records made up to isolate one rule (which file is read, which step counts as a decode step, which
records are compared), and on the committed records, where the text must be what the chapter quotes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pagedkv_edu.bench import RESULTS_DIR  # noqa: E402
from pagedkv_edu.bench import records as R  # noqa: E402
from pagedkv_edu.bench import record_plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _run(running: list[int], step_s: list[float], **fields) -> dict:
    """A run whose timeline has ``running`` requests at each step, each step taking ``step_s`` seconds."""
    return {"timeline": {"running": running, "elapsed_s": list(np.cumsum(step_s)), "kv_utilisation": [1.0] * len(running)},
            "steps": len(running), **fields}


def _serve(length_scale: float = 1, runs: tuple[str, ...] = ("paged", "contiguous"), **fields) -> dict:
    return {"model": "m", "length_scale": length_scale, "block_size": 16, "device": "CPU (x86_64), Triton interpreter",
            "date_utc": "2026-12-01T00:00:00Z", "torch": "2.13.0+cpu", "torch_threads": 2,
            "runs": {p: _run([1, 1], [1.0, 1.0], peak_concurrency=1, saturated_concurrency=1.0, kv_utilisation=1.0,
                             preemptions=0, throughput_tokens_per_s=1.0, ttft_mean_s=1.0) for p in runs}, **fields}


# --- reading ---------------------------------------------------------------------------------------------
def test_load_reads_the_matching_files_in_file_name_order(tmp_path: Path) -> None:
    for name in ("serve-2026-12-02.json", "serve-2026-11-30.json", "decode-2026-12-01.json"):
        (tmp_path / name).write_text(json.dumps({"name": name}))
    assert [r["name"] for r in R.load("serve-*.json", tmp_path)] == ["serve-2026-11-30.json", "serve-2026-12-02.json"]


def test_serve_records_leave_out_the_arrivals_record() -> None:
    names = sorted(p.name for p in RESULTS_DIR.glob("serve-*.json"))
    records = R.serve_records()
    assert len(records) == len(names) - sum("arrivals" in n for n in names) > 0
    assert all("runs" in r and "arrivals" not in r for r in records)


def test_full_size_needs_unscaled_lengths_and_both_memories() -> None:
    records = [_serve(), _serve(length_scale=0.125), _serve(runs=("paged",)), _serve(output_scale=0.2)]
    assert R.full_size(records) == [records[0], records[3]]   # outputs may be scaled; lengths and memories not


def test_the_committed_full_size_record_is_described_as_the_chapter_prints_it() -> None:
    record = R.full_size(R.serve_records())[-1]
    assert R.describe_serve_record(record).splitlines() == [
        "smollm2-135m, lengths x1, outputs x1, block size 16: measured 2026-11-29T11:49:50Z on CPU (x86_64), "
        "torch attention (torch 2.13.0+cpu)",
        "  paged               peak  24,  20.4 while queued, KV utilisation 0.99,  12 preemptions,  1117 steps,   "
        "18.5 tokens/s, mean TTFT  327.7 s",
        "  contiguous          peak  10,  10.0 while queued, KV utilisation 0.48,   0 preemptions,  1874 steps,   "
        "19.4 tokens/s, mean TTFT  367.2 s",
        "  paged+prefix-cache  peak  30,  24.8 while queued, KV utilisation 0.99,  13 preemptions,   887 steps,   "
        "20.9 tokens/s, mean TTFT  249.6 s"]


def test_a_serve_record_names_its_attention_and_its_peers_failures() -> None:
    record = _serve(attention_backend="triton", output_scale=0.2,
                    peers=[{"policy": "transformers generate_batch", "error": "out of memory"},
                           {"policy": "transformers generate", "throughput_tokens_per_s": 3.5, "note": "padded"}],
                    vs_transformers_static={"throughput_ratio": 1.5, "same_tokens": False})
    text = R.describe_serve_record(record).splitlines()
    assert text[0].endswith("outputs x0.2, block size 16: measured 2026-12-01T00:00:00Z on CPU (x86_64), "
                            "triton attention (torch 2.13.0+cpu)")
    assert text[3:] == ["  transformers generate_batch: out of memory", "  transformers generate: 3.5 tokens/s (padded)",
                        "  paged engine / transformers static batching: 1.5x throughput, same greedy tokens: False"]
    assert "torch attention" in R.describe_serve_record(_serve())   # records before the field ran the default


# --- the decode-step fit ------------------------------------------------------------------------------------
def test_decode_steps_are_the_steps_whose_batch_did_not_change() -> None:
    batch, seconds = R.decode_steps(_run([2, 2, 3, 3, 3, 1], [0.5, 0.2, 0.9, 0.3, 0.3, 0.1]))
    assert batch.tolist() == [2, 3, 3] and seconds == pytest.approx([0.2, 0.3, 0.3])


def test_the_fit_recovers_a_step_cost_and_splits_the_ratio() -> None:
    cost = lambda batch: 0.1 + 0.02 * batch                       # noqa: E731: every decode step costs exactly this
    paged = [20] * 30 + [10] * 10                                 # fewer, larger steps
    contiguous = [10] * 60
    record = {"runs": {"paged": _run(paged, [cost(b) for b in paged]),
                       "contiguous": _run(contiguous, [cost(b) for b in contiguous])}}
    fit = R.fit_decode_steps(record)
    assert fit.fixed == pytest.approx(0.1) and fit.per_seq == pytest.approx(0.02)
    assert fit.median_seconds(20) == pytest.approx(0.5) and fit.median_seconds(10) == pytest.approx(0.3)
    assert fit.medians["paged"] == ([10, 20], pytest.approx([0.3, 0.5])) and fit.medians["contiguous"][0] == [10]
    assert fit.steps_factor == 60 / 40
    assert fit.cost_factor == pytest.approx(((30 * 0.5 + 10 * 0.3) / 40) / 0.3)


def test_a_batch_seen_in_fewer_than_five_steps_is_not_plotted() -> None:
    record = {"runs": {"paged": _run([4] * 6 + [7] * 4, [1.0] * 10), "contiguous": _run([2] * 6, [1.0] * 6)}}
    assert R.fit_decode_steps(record).medians["paged"][0] == [4]   # five steady steps of 4, three of 7


def test_the_committed_full_size_fit_is_the_one_the_chapter_prints() -> None:
    record = R.full_size(R.serve_records())[-1]
    fit = R.fit_decode_steps(record)
    assert (round(fit.fixed, 2), round(fit.per_seq, 3)) == (0.12, 0.027)
    assert round(fit.median_seconds(20) / fit.median_seconds(10), 2) == 1.97
    assert (round(fit.steps_factor, 2), round(fit.cost_factor, 2)) == (1.68, 1.76)
    assert round(fit.steps_factor / fit.cost_factor, 2) == record["ratios"]["throughput_tokens_per_s"] == 0.95


# --- the engine against transformers ------------------------------------------------------------------------
def _peer(date: str, commit: str | None = None) -> dict:
    record = {"date_utc": date, "vs_transformers_static": {"throughput_ratio": 1.0}}
    return record if commit is None else dict(record, commit=commit)


def test_peer_records_compare_only_the_newest_code() -> None:
    records = [_peer("2026-12-01T01"), _peer("2026-12-02T01", "aaa"), _peer("2026-12-03T01", "bbb"),
               _peer("2026-12-03T02", "bbb"), _serve()]
    peers = R.peer_records(records)
    assert peers.newest is records[3] and peers.same_code == records[2:4]
    assert peers.earlier == [records[0]]   # an older commit is neither compared nor listed as history


def test_the_committed_comparisons_read_as_the_chapter_prints_them() -> None:
    text = R.describe_peers(R.peer_records(R.serve_records())).splitlines()
    assert text[0] == "all at once, commit b3b653a046d5 (compared only with records of the same code):"
    assert ("   alternating pairs: 37.98 s against 60.04 s (1.58x), 32.11 s against 45.74 s (1.42x), "
            "32.05 s against 44.55 s (1.39x); median 1.42x") in text       # the ledger's evidence (hf-24x)
    assert "   a decode step: 141 ms against a floor of 29 ms (weights + K/V read at 33.3 GB/s): 4.85x" in text
    assert text[-1].startswith("earlier records, of code before records named their commit (history, not compared): "
                               "2026-12-01T19:27 1.29x, ")
    arrivals = R.describe_arrivals(R.load("serve-*-arrivals.json")[-1]).splitlines()
    assert arrivals[-1] == "   engine / static generate: 1.35x throughput, 1.24x lower mean latency, same greedy tokens: True"
    chunked = R.describe_chunked_prefill(R.load("chunked-prefill-*.json")[-1]).splitlines()
    assert chunked[1:] == [
        "          no cap per step:  1 steps,  25.7 s, 1.00x the unchunked time, same first tokens: True",
        "    8,192 tokens per step:  2 steps,  23.8 s, 0.93x the unchunked time, same first tokens: True",
        "    2,048 tokens per step:  7 steps,  21.6 s, 0.84x the unchunked time, same first tokens: True",
        "      512 tokens per step: 26 steps,  23.0 s, 0.89x the unchunked time, same first tokens: True"]


def test_a_failed_peer_shows_its_error_and_no_figure() -> None:
    record = copy.deepcopy(R.load("serve-*-arrivals.json")[-1])
    record["arrivals"]["peers"][1] = {"policy": "transformers continuous batching (x)", "error": "no generate_batch"}
    assert "   transformers continuous batching (x)" + " " * 27 + "no generate_batch" in R.describe_arrivals(record)
    fig = record_plots.arrivals_bars(record)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["paged engine", "transformers generate"] and len(fig.axes[1].patches) == 2


# --- the figures ---------------------------------------------------------------------------------------------
def test_the_timelines_draw_both_runs_and_name_the_record() -> None:
    record = R.full_size(R.serve_records())[-1]
    fig = record_plots.serve_timelines(record)
    running, utilisation = fig.axes
    assert [line.get_label() for line in running.lines] == ["paged", "contiguous"]
    assert list(running.lines[0].get_ydata()) == record["runs"]["paged"]["timeline"]["running"]
    assert list(utilisation.lines[1].get_ydata()) == record["runs"]["contiguous"]["timeline"]["kv_utilisation"]
    assert running.lines[0].get_color() == record_plots.POLICY_COLOURS["paged"]
    assert fig._suptitle.get_text() == "Committed record: smollm2-135m on CPU (x86_64), 2026-11-29"


def test_the_fit_figure_draws_the_medians_and_the_line() -> None:
    fit = R.fit_decode_steps(R.full_size(R.serve_records())[-1])
    ax = record_plots.decode_step_fit(fit)
    points, line = ax.lines[0], ax.lines[-1]
    assert list(points.get_xdata()) == fit.medians["paged"][0]
    assert line.get_label() == f"fit: {fit.fixed:.2f} s + {fit.per_seq:.3f} s × batch"
    assert line.get_ydata()[-1] == pytest.approx(fit.fixed + fit.per_seq * fit.batch.max())
