"""Chapter 1's three-wastes widget: the state model against the simulator, its refusals, the SVG, the widget headless."""

from __future__ import annotations

import html
import itertools
import re
import xml.etree.ElementTree as ET

import ipywidgets as widgets
import pytest

from pagedkv_edu.paper_workloads import FIGURE_2_KV_UTILISATION
from pagedkv_edu.sim.contiguous import reservation_size
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.viz.wastes_view import (KINDS, SYSTEM_LABELS, TL_H, TL_Y, WastesState, frame_of,
                                         timeline_columns, wastes_grid_svg, wastes_svg)
from pagedkv_edu.viz.wastes_widget import WastesWidget
from pagedkv_edu.viz.reservation_gain import ReservationGain
from pagedkv_edu.workload import Request, copilot50
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"
PAPER = FIGURE_2_KV_UTILISATION   # what chapter 1 passes: the paper's Figure 2
REQUESTS = copilot50(seed=0)
FEW = copilot50(seed=0, num_requests=8)   # a smaller draw, cheaper to run (final lengths 984..1,306)
FOUR = copilot50(seed=0, num_requests=4)  # smaller still, for the sweep (final lengths 839..1,189)


def inputs(state: WastesState) -> tuple:
    return state.policy, state.allocator, state.budget, state.max_seq_len


def data_state(svg: str) -> dict[str, str]:
    root = ET.fromstring(svg)   # also proves the SVG is well-formed XML
    return dict(item.split("=", 1) for item in root.get("data-state").split(";"))


# --- the state model ----------------------------------------------------------------------------
def test_the_model_runs_the_simulator_with_its_inputs() -> None:
    state = WastesState(REQUESTS, PAPER, "oracle", "buddy", 12 * 1024, 2048)
    direct = simulate(REQUESTS, "contiguous", 12 * 1024, reserve="oracle", allocator="buddy", max_seq_len=2048)
    frame = state.frame()
    assert (frame.utilisation, dict(frame.waste)) == (direct.utilisation, direct.waste_fractions)
    assert (frame.total_steps, frame.peak_concurrency) == (direct.total_steps, direct.peak_concurrency)
    assert frame.num_requests == 50 and frame.mean_queue_delay == direct.mean_queue_delay


def test_max_matches_the_chapters_prediction_from_the_workload_alone() -> None:
    """Under Max every request holds max_seq_len slots: utilisation is its mean live length over it (chapter 1)."""
    for max_seq_len in (2048, 3072):
        frame = WastesState(REQUESTS, PAPER, "max", "first-fit", 10 * max_seq_len, max_seq_len).frame()
        predicted = sum(r.output_len * (r.prompt_len + (r.output_len + 1) / 2) for r in REQUESTS) / sum(
            (r.output_len + 1) * max_seq_len for r in REQUESTS)
        assert abs(frame.utilisation - predicted) < 0.01, (max_seq_len, frame.utilisation, predicted)
        assert frame.waste["external"] == 0.0     # a budget of whole reservations leaves no hole
    odd = WastesState(REQUESTS, PAPER, "max", "first-fit", 20480, 3072).frame()   # 6 x 3,072 + a 2,048 hole
    assert odd.waste["external"] > 0.05


def test_the_timeline_averages_every_step_and_accounts_for_every_slot() -> None:
    state = WastesState(REQUESTS, PAPER, "pow2")
    result, frame = state.result, state.frame()
    assert len(frame.timeline) == 240 < result.total_steps
    assert all(abs(sum(column) - 1) < 1e-9 for column in frame.timeline)
    # Column widths differ by at most one step, so the columns' mean is the run's mean to within that.
    for k, kind in enumerate(KINDS):
        run_mean = sum(getattr(s, kind) for s in result.steps) / (result.total_steps * result.capacity)
        assert abs(sum(c[k] for c in frame.timeline) / len(frame.timeline) - run_mean) < 2e-3, kind
    assert max(c[KINDS.index("external")] for c in frame.timeline) > 0      # Pow2 strands holes somewhere
    whole = timeline_columns(result, max_columns=1)[0]                      # one column: the run's mean
    assert whole == pytest.approx([sum(getattr(s, k) for s in result.steps) / (result.total_steps * result.capacity)
                                   for k in KINDS], abs=1e-12)
    short = timeline_columns(result, max_columns=result.total_steps)        # one column per step: exact
    assert short[17] == tuple(getattr(result.steps[17], k) / result.capacity for k in KINDS)


def test_changing_an_input_reruns_and_the_others_stay() -> None:
    state = WastesState(REQUESTS, PAPER)
    before = state.frame()
    state.update(policy="pow2")
    assert inputs(state) == ("pow2", "first-fit", 20480, 2048)
    assert state.frame().utilisation > before.utilisation + 0.2            # the chapter's 71.2% against 48.0%
    state.update(allocator="buddy")
    assert inputs(state) == ("pow2", "buddy", 20480, 2048) and state.frame().waste["internal"] > 0.3   # rounding


REFUSED = [
    (dict(budget=1024), "KV budget=1,024"),                                  # under one Max reservation of 2,048
    (dict(max_seq_len=1280), "max_seq_len=1,280"),                           # request 14 reaches 1,464 tokens
    (dict(policy="max", allocator="buddy", budget=3072, max_seq_len=2304), "KV budget=3,072"),  # largest block 2,048
    (dict(policy="fifo"), "'fifo'"),
    (dict(allocator="best-fit"), "'best-fit'"),
    (dict(budget=0), "got 0"),
    (dict(budget=True), "got True"),
]


@pytest.mark.parametrize(("change", "named"), REFUSED, ids=[str(c) for c, _ in REFUSED])
def test_a_refused_change_names_its_value_and_changes_nothing(change: dict, named: str) -> None:
    state = WastesState(REQUESTS, PAPER, "oracle")
    before, frame, result = inputs(state), state.frame(), state.result
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        state.update(**change)
    assert inputs(state) == before and state.frame() is frame and state.result is result


def test_the_model_refuses_exactly_what_the_simulator_refuses() -> None:
    refused = accepted = 0
    for policy, allocator, budget, max_seq_len in itertools.product(("max", "pow2", "oracle"), ("first-fit", "buddy"),
                                                                    (1024, 2048, 3072), (1024, 2048, 2304)):
        try:
            simulate(FOUR, "contiguous", budget, reserve=policy, allocator=allocator, max_seq_len=max_seq_len)
        except ValueError:
            with pytest.raises(ValueError):
                WastesState(FOUR, PAPER, policy, allocator, budget, max_seq_len)
            refused += 1
        else:
            WastesState(FOUR, PAPER, policy, allocator, budget, max_seq_len)
            accepted += 1
    assert refused > 10 and accepted > 10          # the sweep crosses the boundary both ways


def test_the_boundaries_are_accepted() -> None:
    longest = max(r.final_len for r in FEW)
    WastesState(FEW, PAPER, "oracle", "first-fit", 20480, longest)          # exactly the longest request
    with pytest.raises(ValueError, match=f"at least {longest:,}"):
        WastesState(FEW, PAPER, "oracle", "first-fit", 20480, longest - 1)
    WastesState(FEW, PAPER, "max", "first-fit", 2048, 2048)                 # exactly one reservation
    WastesState(FEW, PAPER, "max", "buddy", 3072, 2048)                     # one block of 2,048 in 2,048 + 1,024
    largest = max(reservation_size(r.prompt_len, r.output_len, 2048, "oracle") for r in FEW)
    WastesState(FEW, PAPER, "oracle", "first-fit", largest, 2048)
    with pytest.raises(ValueError, match="more than the whole"):
        WastesState(FEW, PAPER, "oracle", "first-fit", largest - 1, 2048)


def test_the_paper_figures_and_the_workload_are_checked() -> None:
    with pytest.raises(ValueError, match="lack"):
        WastesState(REQUESTS, {"max": 0.204, "pow2": 0.268})
    with pytest.raises(ValueError, match="shares"):
        WastesState(REQUESTS, {**PAPER, "oracle": 38.2})
    with pytest.raises(ValueError, match="unknown systems"):
        WastesState(REQUESTS, {**PAPER, "orca": 0.3})
    with pytest.raises(ValueError, match="at least one request"):
        WastesState([], PAPER)
    with pytest.raises(ValueError, match="contiguous"):
        frame_of(simulate(FEW, "paged", 4096), 2048, PAPER)
    WastesState([Request(0, 5, 3)], PAPER, budget=64, max_seq_len=8)


# --- the renderer -------------------------------------------------------------------------------
def test_the_svg_carries_the_models_state() -> None:
    frame = WastesState(REQUESTS, PAPER, "pow2", "buddy").frame()
    svg = wastes_svg(frame)
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("class") == "pagedkv-wastes"
    assert root.get("data-state") == frame.data_state
    state = data_state(svg)
    assert (state["policy"], state["allocator"], state["budget"], state["max_seq_len"]) == ("pow2", "buddy", "20480",
                                                                                            "2048")
    assert float(state["util"]) == round(frame.utilisation, 3) and 0.45 < float(state["util"]) < 0.55  # 49.2%
    assert float(state["internal"]) > float(state["external"]) > 0 and int(state["peak"]) == frame.peak_concurrency
    assert svg == wastes_svg(WastesState(REQUESTS, PAPER, "pow2", "buddy").frame())   # deterministic
    assert "<defs" not in svg and " id=" not in svg


def test_the_svg_draws_each_kind_the_bar_and_figure_2() -> None:
    frame = WastesState(REQUESTS, PAPER, "oracle").frame()
    root = ET.fromstring(wastes_svg(frame))
    groups = {g.get("class"): g for g in root.iter(f"{SVG}g")}
    painted = [e.get("data-kind") for e in groups["timeline"] if e.get("data-kind")]
    assert painted == ["free", "external", "internal", "over_reserved", "used"]     # the tallest stack first
    tops = {p.get("data-kind"): p.get("d").split() for p in groups["timeline"].iter(f"{SVG}path")}
    assert all(len(points) == len(frame.timeline) + 4 for points in tops.values())   # one point a column, 4 corners
    y = float(tops["used"][5].split(",")[1])                                            # column 3's top of "used"
    assert y == pytest.approx(TL_Y + TL_H * (1 - frame.timeline[3][0]), abs=0.06)
    bar = {r.get("data-kind"): float(r.get("width")) for r in groups["utilisation"].iter(f"{SVG}rect")
           if r.get("data-kind")}
    assert bar.keys() == {"used", "over_reserved", "external"}          # Oracle first-fit: no internal waste
    assert bar["used"] / sum(bar.values()) == pytest.approx(frame.utilisation, abs=0.005)
    bars = [(r.get("data-system"), r.get("data-who"), float(r.get("data-value")))
            for r in groups["figure2"].iter(f"{SVG}rect")]
    assert [(s, v) for s, who, v in bars if who == "paper"] == list(PAPER.items())
    assert [(s, v) for s, who, v in bars if who == "run"] == [("oracle", round(frame.utilisation, 3))]
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "Orca (Oracle), first-fit" in texts and "paper 38.2%" in texts and "76.6% of the held slots" in texts


def test_the_still_grid_shows_each_setting() -> None:
    frames = [WastesState(FEW, PAPER, p, a, 8192).frame() for p, a in (("max", "first-fit"), ("oracle", "buddy"),
                                                                        ("pow2", "first-fit"))]
    svg = wastes_grid_svg(frames)
    root = ET.fromstring(svg)
    assert root.get("class") == "pagedkv-wastes-grid"
    assert [g.get("data-state") for g in root.iter(f"{SVG}g") if g.get("class") == "cell"] == \
        [f.data_state for f in frames]
    assert root.get("data-state") == " | ".join(f.data_state for f in frames)
    for bad in (frames[:1], frames * 2):
        with pytest.raises(ValueError, match="2 to 4"):
            wastes_grid_svg(bad)


# --- the widget, headless -----------------------------------------------------------------------
def test_each_redraw_case_redraws_what_the_model_holds() -> None:
    widget = WastesWidget(REQUESTS, PAPER)
    cases = widget.redraw_cases()
    assert 3 <= len(cases) <= 6
    assert isinstance(getattr(widget, cases[0][0]), (widgets.Dropdown, widgets.IntSlider, widgets.SelectionSlider))
    assert widget.message.value == "" and widget.drawing.value == wastes_svg(widget.state.frame())
    seen = {widget.drawing.value}
    for name, value in cases:
        before = widget.drawing.value
        getattr(widget, name).value = value
        assert widget.message.value == "", (name, value, widget.message.value)
        assert widget.drawing.value != before, (name, value)
        assert widget.drawing.value == wastes_svg(widget.state.frame())
        assert getattr(widget.state, name) == value and data_state(widget.drawing.value)[name] == str(value)
        seen.add(widget.drawing.value)
    assert len(seen) == len(cases) + 1
    # Independently: the last picture is the simulator's run of the controls' values.
    direct = simulate(REQUESTS, "contiguous", widget.budget.value, reserve=widget.policy.value,
                      allocator=widget.allocator.value, max_seq_len=widget.max_seq_len.value)
    assert data_state(widget.drawing.value)["util"] == f"{direct.utilisation:.3f}"


def test_a_refused_combination_shows_a_message_and_keeps_the_picture() -> None:
    widget = WastesWidget(FEW, PAPER, budget=2048)
    picture, before, frame = widget.drawing.value, inputs(widget.state), widget.state.frame()
    widget.max_seq_len.value = 3072                 # a 3,072-slot Max reservation in a 2,048-slot budget
    assert "KV budget=2,048 refused" in widget.message.value and "3,072" in widget.message.value
    assert widget.drawing.value == picture and inputs(widget.state) == before
    widget.max_seq_len.value = 1280                 # still refused, now for a request longer than that (1,306)
    assert "max_seq_len=1,280 refused" in widget.message.value and widget.drawing.value == picture
    widget.budget.value = 4096                      # budget accepted, max_seq_len still too short
    assert "max_seq_len=1,280" in widget.message.value and widget.state.budget == 2048
    widget.max_seq_len.value = 2048                 # now every control's value is valid together
    assert widget.message.value == "" and inputs(widget.state) == ("max", "first-fit", 4096, 2048)
    assert widget.drawing.value != picture == wastes_svg(frame) and widget.state.frame() is not frame


def test_the_static_bundle_is_the_current_picture() -> None:
    widget = WastesWidget(FEW, PAPER, "pow2", "buddy", 4096)
    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"] == widget.drawing.value
    assert "Orca (Pow2), buddy" in bundle["text/plain"] and "application/vnd.jupyter.widget-view+json" in bundle
    assert [label for label, _ in widget.policy.options] == [f"Orca ({SYSTEM_LABELS[p]})" for p in ("max", "pow2",
                                                                                                     "oracle")]


# --- in zh-TW -----------------------------------------------------------------------------------
def drawn_text(svg: str) -> str:
    """Every line the picture writes for a reader: its texts, one a line, and its aria-label if any."""
    texts = re.findall(r"<text\b[^>]*>([^<]*)</text>", svg) + re.findall(r'aria-label="([^"]*)"', svg)
    return "\n".join(html.unescape(t) for t in texts)


def shown(message_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", message_html))


def test_the_widget_and_its_pictures_speak_zh_tw(zh_tw: None) -> None:
    widget = WastesWidget(FEW, PAPER, budget=2048)
    assert (widget.policy.description, widget.allocator.description, widget.budget.description) == \
        ("預留策略", "配置器", "KV 預算")
    assert list(widget.allocator.options) == [("首次適配", "first-fit"), ("夥伴配置", "buddy")]   # values stay code
    text = drawn_text(widget.drawing.value)
    assert untranslated(text) == [] and "Orca（Max），首次適配配置區" in text and "第 0 步" in text
    assert "過度預留（稍後才用到）" in text and "利用率：論文的圖 2" in text   # a legend made at import time
    widget.max_seq_len.value = 3072                 # refused: one reservation is more than the budget
    refusal = shown(widget.message.value)
    assert refusal.startswith("KV 預算 2,048 被拒絕：Max 為一個請求最多預留 3,072 個槽位")
    assert refusal.endswith("；請調高預算，或調低 max_seq_len。圖仍保留上一次被接受的設定。")
    widget.max_seq_len.value = 2048
    widget.allocator.value = "buddy"
    assert widget.message.value == "" and "夥伴配置區" in drawn_text(widget.drawing.value)
    assert widget.state.allocator == "buddy"
    plain = widget._repr_mimebundle_()["text/plain"]
    assert plain.startswith("三種浪費小工具：Orca（Max），夥伴配置，") and untranslated(plain) == []
    grid = drawn_text(wastes_grid_svg([WastesState(FEW, PAPER, p, a, 8192).frame()
                                       for p, a in (("max", "first-fit"), ("oracle", "buddy"))]))
    assert untranslated(grid) == [] and "Oracle，夥伴配置：" in grid and "虛線刻度：論文的數字" in grid


def test_the_reservation_gain_report_speaks_zh_tw(zh_tw: None) -> None:
    """Chapter 2's report of the same contiguous reservations, one line each."""
    report = ReservationGain(20480, 23.4, {2048: 10.0, 8192: 2.5}).report()
    assert report.splitlines() == ["max_seq_len 2,048：放得下 10 個預留，連續式容納 10.0 個，分頁式 23.4 個：2.3 倍",
                                   "max_seq_len 8,192：放得下  2 個預留，連續式容納  2.5 個，分頁式 23.4 個：9.4 倍"]
