"""The scheduler lab (chapter 6): its state model against the simulator, its refusals, the renderer, and the
widget driven headless."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
import re

import pytest

from pagedkv_edu.sim.batching import serve
from pagedkv_edu.viz.scheduler_lab import (BLOCK_SIZE, GAP_BINS, TRADE_OFFS, SchedulerLab, SchedulerSettings,
                                           chapter_cost, chapter_workload, run_lab, scheduler_grid_svg, scheduler_svg)
from tests.zh_output import CJK, untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"


def data_state(svg: str) -> dict[str, str]:
    """The root's ``data-state`` as a dict (parsing also proves the SVG is well-formed XML)."""
    root = ET.fromstring(svg)
    return dict(item.split("=", 1) for item in root.get("data-state", "").split(";"))


def lab_state(lab: SchedulerLab) -> tuple:
    return lab.settings, lab.run, lab.index


# --- the state model -------------------------------------------------------------------------------
@pytest.mark.parametrize("cap, watermark", [(None, 0.0), (128, 0.01), (32, 0.1)])
def test_a_paged_run_is_the_simulator_s_run(cap: int | None, watermark: float) -> None:
    """``sim.batching.serve`` drives its own engine over the same requests on the same clock: the same steps,
    preemptions and every token's time."""
    settings = SchedulerSettings(max_num_batched_tokens=cap, watermark=watermark)
    run = run_lab(settings)
    requests = chapter_workload()
    num_blocks = settings.kv_budget_tokens // BLOCK_SIZE
    served = serve(requests, "continuous", kv_budget_tokens=settings.kv_budget_tokens, max_num_seqs=len(requests),
                   block_size=BLOCK_SIZE, max_num_batched_tokens=cap, watermark_blocks=math.ceil(watermark * num_blocks),
                   cost=chapter_cost())
    assert run.num_steps == served.num_steps and run.preemptions == served.preemptions
    assert run.time_ms == pytest.approx(served.time)
    assert run.ttft_ms == pytest.approx([r.ttft for r in served.requests])
    assert run.gaps_ms == pytest.approx([g for r in served.requests for g in r.gaps])
    assert max(run.gaps_ms) == pytest.approx(served.max_itl)


def test_the_trace_records_the_run() -> None:
    run = run_lab(SchedulerSettings())
    requests = chapter_workload()
    assert len(run.trace) == run.num_steps and run.preemptions > 0
    assert sum(len(f.preempted_now) for f in run.trace) == run.preemptions
    assert [len(steps) for steps in run.token_steps] == [r.output_len for r in requests]
    last = run.trace[-1]
    assert [last.outputs(r.request_id) for r in requests] == [r.output_len for r in requests]
    # each request's first token is sampled at the first frame that shows it
    assert run.ttft_steps == tuple(next(i for i, f in enumerate(run.trace) if f.outputs(r.request_id)) + 1
                                   for r in requests)
    assert sum(run.gap_histogram()) == len(run.gaps_ms) == sum(r.output_len - 1 for r in requests)


def test_the_chapter_s_trade_offs_show() -> None:
    """A smaller token budget shortens the worst gap and delays first tokens; a watermark trades preemptions for
    admissions; contiguous memory holds ten reservations at most."""
    runs = {s: run_lab(s) for s in TRADE_OFFS}
    free, ridge, small, guarded = (runs[s] for s in TRADE_OFFS)
    assert max(free.gaps_ms) > 5 * max(small.gaps_ms) and max(small.gaps_ms) < 1.05 * small.decode_floor_ms
    assert small.ttft_p(0.99) > 1.5 * free.ttft_p(0.99)
    assert guarded.preemptions < ridge.preemptions and guarded.num_steps > ridge.num_steps
    contiguous = run_lab(SchedulerSettings(memory="contiguous"))
    assert contiguous.peak_running == 640 // 64 < free.peak_running and contiguous.preemptions == 0


def test_settings_change_the_run_and_keep_the_step() -> None:
    lab = SchedulerLab()
    assert lab.index == next(i for i, f in enumerate(lab.run.trace) if f.preempted_now)   # the first preemption
    lab.seek(30)
    lab.set_max_num_seqs(4)
    assert lab.settings.max_num_seqs == 4 and lab.run.peak_running == 4 and lab.index == 30
    lab.set_kv_budget(1024)
    lab.set_max_num_seqs(None)
    assert lab.run.num_steps < 31 and lab.index == lab.run.num_steps - 1     # a shorter run: its last step
    lab.set_token_budget(64)
    lab.set_watermark(0.2)
    lab.set_memory("contiguous")
    assert lab.settings == SchedulerSettings("contiguous", 64, 0.2, None, 1024)


@pytest.mark.parametrize("change, named", [
    ({"memory": "contiguous", "kv_budget_tokens": 48}, "kv_budget_tokens=48"),   # no 64-slot reservation fits
    ({"kv_budget_tokens": 32}, "kv_budget_tokens=32"),                          # a request needs more than 8 blocks
    ({"watermark": 1.0}, "1.0"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
    ({"memory": "swap"}, "swap"),
])
def test_a_refused_setting_changes_nothing(change: dict, named: str) -> None:
    lab = SchedulerLab()
    lab.seek(7)
    if "memory" in change and "kv_budget_tokens" in change:   # the combination: each alone is served
        lab.update(memory="contiguous")
        lab.update(memory="paged", kv_budget_tokens=48)
    before = lab_state(lab)
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        lab.update(**change)
    assert lab_state(lab) == before and lab.run is before[1]


def test_seek_refuses_a_step_outside_the_run() -> None:
    lab = SchedulerLab()
    for bad in (-1, lab.num_frames, 2.0, True):
        with pytest.raises(ValueError, match="step index"):
            lab.seek(bad)   # type: ignore[arg-type]
    assert lab.index == next(i for i, f in enumerate(lab.run.trace) if f.preempted_now)


# --- the renderer ---------------------------------------------------------------------------------
def test_the_picture_carries_its_state() -> None:
    lab = SchedulerLab(SchedulerSettings(max_num_batched_tokens=64, watermark=0.05, max_num_seqs=16), index=3)
    svg = lab.svg()
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("class") == "pagedkv-scheduler"
    state = data_state(svg)
    assert root.get("data-state") == lab.state
    assert (state["memory"], state["token_budget"], state["watermark"], state["max_num_seqs"], state["kv_budget"],
            state["step"]) == ("paged", "64", "0.05", "16", "640", f"4/{lab.num_frames}")
    assert int(state["preemptions"]) == lab.run.preemptions and float(state["ttft_p99_ms"]) == pytest.approx(
        lab.run.ttft_p(0.99), abs=0.005)
    gaps = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "gaps")
    assert list(map(int, gaps.get("data-counts").split())) == list(lab.run.gap_histogram())
    assert len(lab.run.gap_histogram()) == len(GAP_BINS)
    counters = next(t for t in root.iter(f"{SVG}text") if t.get("class") == "counters")
    assert counters.text.startswith(f"step 4/{lab.num_frames}")   # the replay's frame of that step
    assert svg == scheduler_svg(run_lab(lab.settings), 3)        # deterministic: a fresh run draws the same


def test_the_still_grid_draws_each_run_on_one_axis() -> None:
    runs = [run_lab(s) for s in TRADE_OFFS]
    svg = scheduler_grid_svg(runs)
    root = ET.fromstring(svg)
    assert root.get("class") == "pagedkv-scheduler-grid"
    assert root.get("data-state") == " | ".join(r.settings.state for r in runs)
    tiles = [g for g in root.iter(f"{SVG}g") if g.get("class") == "lab-run"]
    assert [t.get("data-state") for t in tiles] == [r.state for r in runs]
    axis_labels = {t.text for t in root.iter(f"{SVG}text") if (t.text or "").endswith("ms (modelled)")}
    assert len(axis_labels) == 1                                  # one TTFT axis for every tile
    with pytest.raises(ValueError):
        scheduler_grid_svg([])


# --- the widget, headless ------------------------------------------------------------------------
def test_the_widget_redraws_for_each_case_and_refuses_without_a_traceback() -> None:
    widgets = pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.scheduler_widget import NO_CAP, SchedulerWidget

    widget = SchedulerWidget()
    cases = widget.redraw_cases()
    assert 3 <= len(cases) <= 6
    assert isinstance(getattr(widget, cases[0][0]), (widgets.Dropdown, widgets.IntSlider, widgets.SelectionSlider))
    assert widget.drawing.value == widget.state.svg() and widget.message.value == ""
    for name, value in cases:
        before = widget.drawing.value
        getattr(widget, name).value = value
        assert widget.message.value == "", (name, widget.message.value)
        assert widget.drawing.value != before, name
        assert widget.drawing.value == scheduler_svg(widget.state.run, widget.state.index)
    state = data_state(widget.drawing.value)
    assert (state["memory"], state["token_budget"], state["watermark"], state["max_num_seqs"]) == \
        (widget.memory.value, str(widget.token_budget.value), f"{widget.watermark.value:g}",
         str(widget.max_num_seqs.value))
    assert state["step"] == f"{widget.step.value + 1}/{widget.step.max + 1}"

    widget.max_num_seqs.value = NO_CAP                          # the slider's "no cap" is the engine's None
    assert widget.state.settings.max_num_seqs is None and data_state(widget.drawing.value)["max_num_seqs"] == "none"

    picture, kv = widget.drawing.value, widget.kv_budget.value   # contiguous memory: 48 tokens hold no reservation
    widget.kv_budget.value = 48
    assert "kv_budget_tokens=48" in widget.message.value and "refused" in widget.message.value
    assert widget.drawing.value == picture and widget.kv_budget.value == kv == widget.state.settings.kv_budget_tokens
    widget.memory.value = "paged"                               # a good change clears the message
    assert widget.message.value == "" and widget.drawing.value != picture

    widget.step.value = widget.step.max
    widget.kv_budget.value = 1024                               # a shorter run: the step slider follows it
    assert widget.step.max == widget.state.num_frames - 1 and widget.step.value == widget.state.index

    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"] == widget.drawing.value
    assert "paged" in bundle["text/plain"] and f"of {widget.state.num_frames}" in bundle["text/plain"]


# --- zh-TW ----------------------------------------------------------------------------------------
def svg_text(svg: str) -> str:
    """The text a reader sees in ``svg``, one ``<text>`` a line."""
    return "\n".join(re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S))


def test_the_lab_speaks_zh_tw(zh_tw: None) -> None:
    widgets = pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.scheduler_widget import SchedulerWidget

    widget = SchedulerWidget()
    assert [c.description for c in (widget.memory, widget.token_budget, widget.watermark, widget.max_num_seqs,
                                    widget.kv_budget, widget.step)] == ["記憶體", "token 預算", "水位線", "座位",
                                                                        "KV token 數", "步驟"]
    assert widget.memory._options_labels == ("分頁式", "連續式") and widget.token_budget._options_labels[-1] == "不設上限"
    assert type(widget.memory.description) is str and type(widget.memory._options_labels[0]) is str   # serialisable
    text = svg_text(widget.drawing.value)
    assert untranslated(text) == [] and "首個 token 延遲時間" in text and "分頁式記憶體" in text
    widget.memory.value = "contiguous"                       # a control change redraws in Chinese
    widget.kv_budget.value = 48                              # ... and a refusal says why in Chinese
    assert "已拒絕" in widget.message.value and "kv_budget_tokens=48" in widget.message.value
    assert "連續式記憶體" in svg_text(widget.drawing.value) and "排程器實驗" in widget._repr_mimebundle_()["text/plain"]
    grid = svg_text(scheduler_grid_svg([widget.state.run, run_lab(TRADE_OFFS[2])]))
    assert untranslated(grid) == [] and CJK.search(grid)
