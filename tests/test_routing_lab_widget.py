"""The routing lab (chapter 11): its model against route(), its refusals, the SVG renderer, the widget headless."""

from __future__ import annotations

import xml.etree.ElementTree as ET
import re
from dataclasses import replace

import pytest

from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.sim.routing import POLICIES, HybridThresholds, route
from pagedkv_edu.sim.routing_workloads import consultants, tenants
from pagedkv_edu.viz.routing_lab import (BLOCK_OPTIONS, CONTROLS, RoutingLabState, data_state, routing_lab_grid,
                                         routing_lab_svg, still_grid)
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SVG = "{http://www.w3.org/2000/svg}"
SMALL = {"num_requests": 48, "warmup": 12, "rates": (600.0, 2500.0)}     # a quick run of the same experiment


@pytest.fixture(scope="module")
def lab() -> RoutingLabState:
    return RoutingLabState("tenants", 600.0, 512, HybridThresholds(0.3, 8, 1.5), **SMALL)


def largest(requests: list) -> int:
    """Blocks of 16 the longest request of a draw holds (prompt and answer): the smallest pool that can serve it."""
    return max(blocks_needed(r.prompt_len + len(r.output), 16) for r in requests)


def policies(svg: str) -> dict[str, ET.Element]:
    return {g.get("data-policy"): g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("class") == "policy"}


# --- the state model -----------------------------------------------------------------------------
def test_each_row_is_what_route_reports_for_that_policy(lab: RoutingLabState) -> None:
    frame = lab.frame
    assert [r.policy for r in frame.rows] == list(POLICIES)
    requests = tenants(48, 600.0, 0)            # drawn again here, not taken from the lab
    for row in frame.rows:
        run = route(requests, row.policy, 4, num_blocks=512, thresholds=HybridThresholds(0.3, 8, 1.5), warmup=12)
        summary = run.summary()
        measured = run.outcomes[12:]
        assert row.hit_rate == pytest.approx(sum(o.hit_tokens for o in measured) / sum(o.prompt_tokens for o in measured))
        assert round(row.hit_rate, 4) == summary["hit_rate"]
        assert (round(row.ttft_p50_ms, 2), round(row.ttft_p99_ms, 2)) == (summary["ttft_p50_ms"], summary["ttft_p99_ms"])
        assert list(row.requests_per_replica) == summary["requests_per_replica"] and sum(row.requests_per_replica) == 36
        assert row.load_imbalance == pytest.approx(max(row.requests_per_replica) / (36 / 4))
    assert frame.row("prefix-affinity").hit_rate > frame.row("round-robin").hit_rate    # the chapter's finding, kept


def test_the_thresholds_steer_the_hybrid(lab: RoutingLabState) -> None:
    never = lab.preview(cache_threshold=1.0)                       # no match is above all of a prompt: least load
    assert never.row("hybrid") == replace(never.row("least-loaded"), policy="hybrid")
    always = lab.preview(cache_threshold=0.0, abs_threshold=10**6)   # any match counts, and no imbalance: affinity
    assert always.row("hybrid") == replace(always.row("prefix-affinity"), policy="hybrid")
    assert always.row("hybrid") != never.row("hybrid")
    assert never.row("round-robin") == always.row("round-robin") == lab.frame.row("round-robin")   # blind to them


def test_the_inputs_change_the_experiment(lab: RoutingLabState) -> None:
    small, large = lab.preview(num_blocks=128), lab.preview(num_blocks=3072)
    assert small.row("round-robin").hit_rate < large.row("round-robin").hit_rate        # a small pool evicts
    busy = lab.preview(rate_per_s=2500.0)
    assert busy.row("round-robin").ttft_p99_ms > lab.frame.row("round-robin").ttft_p99_ms
    shared = lab.preview(workload="consultants")
    assert len({round(r.hit_rate, 6) for r in shared.rows}) == 1      # one system prompt: every policy finds it
    assert max(shared.row("prefix-affinity").requests_per_replica) == 36    # and affinity sends it all to one replica


def test_preview_and_configure(lab: RoutingLabState) -> None:
    before = (lab.inputs, lab.frame)
    lab.preview(workload="consultants", num_blocks=3072)
    assert (lab.inputs, lab.frame) == before                           # a preview changes nothing
    state = RoutingLabState("tenants", 600.0, 512, **SMALL)
    frame = state.configure(rate_per_s=2500.0, cache_threshold=0.5)
    assert state.frame is frame and state.inputs.rate_per_s == 2500.0 and state.inputs.thresholds.cache_threshold == 0.5
    assert state.inputs.num_blocks == 512 and state.inputs.workload == "tenants"    # the others kept


@pytest.mark.parametrize("change, named", [
    ({"workload": "random"}, "'random'"), ({"rate_per_s": 700.0}, "700.0"), ({"rate_per_s": True}, "True"),
    ({"num_blocks": 0}, "num_blocks"), ({"num_blocks": 2.5}, "2.5"), ({"cache_threshold": 1.5}, "1.5"),
    ({"cache_threshold": "0.3"}, "'0.3'"), ({"abs_threshold": -1}, "-1"), ({"abs_threshold": 2.0}, "2.0"),
    ({"rel_threshold": 0.5}, "0.5"), ({"blocks": 512}, "'blocks'"),
])
def test_a_bad_value_is_refused_by_name_and_changes_nothing(lab: RoutingLabState, change: dict, named: str) -> None:
    before = (lab.inputs, lab.frame)
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        lab.configure(**change)
    assert (lab.inputs, lab.frame) == before and lab.frame is before[1]


def test_a_pool_too_small_for_the_longest_request_is_refused_for_that_workload_only() -> None:
    need_c, need_t = largest(consultants(48, 600.0, 0)), largest(tenants(48, 600.0, 0))
    assert need_t < need_c
    state = RoutingLabState("tenants", 600.0, 3072, **SMALL)
    state.configure(num_blocks=need_c - 1)                         # the tenants fit
    before = (state.inputs, state.frame)
    with pytest.raises(ValueError, match=f"{need_c - 1} blocks per replica refused for the consultants.*need {need_c}"):
        state.configure(workload="consultants")
    assert (state.inputs, state.frame) == before
    with pytest.raises(ValueError, match=f"need {need_t}"):
        state.configure(num_blocks=need_t - 1)
    assert state.configure(num_blocks=need_c, workload="consultants").inputs.num_blocks == need_c   # exactly enough


def test_every_control_is_an_input() -> None:
    assert set(CONTROLS) == {"workload", "rate_per_s", "num_blocks", "cache_threshold", "abs_threshold", "rel_threshold"}
    with pytest.raises(ValueError, match="rates must be distinct"):
        RoutingLabState(rates=(600.0, 600.0), num_requests=10, warmup=2)
    with pytest.raises(ValueError, match="unknown workload 'x'"):
        RoutingLabState("x", num_requests=10, warmup=2)


# --- the renderer --------------------------------------------------------------------------------
def test_the_svg_says_its_state_and_draws_every_policy(lab: RoutingLabState) -> None:
    svg = routing_lab_svg(lab.frame)
    root = ET.fromstring(svg)                     # well-formed
    assert root.tag == f"{SVG}svg" and root.get("class") == "pagedkv-routinglab"
    state = dict(item.split("=", 1) for item in root.get("data-state").split(";"))
    hits = sorted(r.hit_rate for r in lab.frame.rows)
    assert state["workload"] == "tenants" and state["rate"] == "600" and state["blocks"] == "512"
    assert (state["cache_threshold"], state["abs_threshold"], state["rel_threshold"]) == ("0.3", "8", "1.5")
    assert state["hit"] == f"{hits[0]:.3f}-{hits[-1]:.3f}"
    assert state["hybrid"].startswith(f"{lab.frame.row('hybrid').hit_rate:.3f}/")
    drawn = policies(svg)
    assert list(drawn) == list(POLICIES)
    for row in lab.frame.rows:
        g = drawn[row.policy]
        assert float(g.get("data-hit")) == pytest.approx(row.hit_rate, abs=1e-4)
        assert float(g.get("data-p99")) == pytest.approx(row.ttft_p99_ms, abs=0.01)
        assert g.get("data-per-replica") == " ".join(map(str, row.requests_per_replica))
    assert svg == routing_lab_svg(lab.frame) and data_state(lab.preview(rate_per_s=2500.0)) != root.get("data-state")


def test_text_is_escaped(lab: RoutingLabState) -> None:
    odd = replace(lab.frame, inputs=replace(lab.frame.inputs, workload='a<b & "c"'))
    root = ET.fromstring(routing_lab_svg(odd))
    assert 'workload=a<b & "c"' in root.get("data-state")
    assert any((t.text or "").startswith('a<b & "c" at 600') for t in root.iter(f"{SVG}text"))


def test_the_still_grid(lab: RoutingLabState) -> None:
    frames = [lab.frame, lab.preview(workload="consultants")]
    root = ET.fromstring(routing_lab_grid(frames))
    panels = [g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]
    assert root.get("class") == "pagedkv-routinglab-grid" and [p.get("data-state") for p in panels] == \
        [data_state(f) for f in frames]
    for count in (1, 5):
        with pytest.raises(ValueError, match=f"got {count}"):
            routing_lab_grid([lab.frame] * count)
    before = lab.inputs
    grid = ET.fromstring(still_grid(lab, [{"num_blocks": 3072}, {"rate_per_s": 2500.0, "workload": "consultants"}]))
    assert lab.inputs == before and "blocks=3072" in grid.get("data-state") and "rate=2500" in grid.get("data-state")


# --- the widget, headless ------------------------------------------------------------------------
def test_the_widget_reruns_on_each_control_and_refuses_without_a_traceback() -> None:
    widgets = pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.routing_lab_widget import RoutingLabWidget

    widget = RoutingLabWidget(**SMALL)
    assert widget.drawing.value == routing_lab_svg(widget.state.frame) and widget.message.value == ""
    cases = widget.redraw_cases()
    assert 3 <= len(cases) <= 6
    assert isinstance(getattr(widget, cases[0][0]), (widgets.Dropdown, widgets.IntSlider, widgets.SelectionSlider))
    for name, value in cases:
        before = widget.drawing.value
        getattr(widget, name).value = value
        assert widget.message.value == "", (name, value, widget.message.value)
        assert widget.drawing.value != before, (name, value)
        assert widget.drawing.value == routing_lab_svg(widget.state.frame)
    assert widget.state.inputs.workload == "tenants" and widget.state.inputs.rate_per_s == 2500.0
    assert widget.state.inputs.num_blocks == 512 and widget.state.inputs.thresholds.cache_threshold == 0.0

    # a combination the model refuses: a pool that holds every tenant's request but not the longest consultant's
    assert largest(tenants(48, 2500.0, 0)) <= 80 < largest(consultants(48, 2500.0, 0)) and 80 in BLOCK_OPTIONS
    widget.blocks.value = 80
    picture = widget.drawing.value
    widget.workload.value = "consultants"
    assert "80 blocks per replica refused for the consultants" in widget.message.value
    assert widget.drawing.value == picture and widget.state.inputs.workload == "tenants"
    assert widget.workload.value == "tenants"                      # the control shows what the picture shows
    widget.blocks.value = 3072
    assert widget.message.value == "" and "blocks=3072" in widget.drawing.value

    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"] == widget.drawing.value
    assert data_state(widget.state.frame) in bundle["text/plain"]


# --- zh-TW ----------------------------------------------------------------------------------------
def svg_text(svg: str) -> str:
    return "\n".join(re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S))


def test_the_lab_speaks_zh_tw(lab: RoutingLabState, zh_tw: None) -> None:
    pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.routing_lab_widget import RoutingLabWidget

    svg = routing_lab_svg(lab.frame)
    text = svg_text(svg)
    assert untranslated(text) == [] and "前綴命中率" in text and text.startswith("租戶，每秒 600 個請求")
    assert 'aria-label="路由策略比較"' in svg
    grid = svg_text(routing_lab_grid([lab.frame, lab.preview(workload="consultants")]))
    assert untranslated(grid) == [] and "顧問" in grid
    widget = RoutingLabWidget(**SMALL)
    assert (widget.workload.description, widget.rate.description, widget.blocks.description) == \
        ("工作負載", "到達率", "區塊數／副本")
    assert widget.workload._options_labels == ("顧問", "租戶", "對話") and widget.workload.value == "tenants"
    widget.blocks.value = 80
    widget.workload.value = "consultants"                    # refused: the reason in Chinese, the control put back
    assert "已拒絕，沒有重跑：每個副本 80 個區塊" in widget.message.value and widget.workload.value == "tenants"
