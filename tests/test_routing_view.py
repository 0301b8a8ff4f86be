"""The routing picture: its state model, the pure SVG renderer and the widget, headless."""

from __future__ import annotations

import re

import pytest

from pagedkv_edu.sim.routing import route
from pagedkv_edu.sim.routing_workloads import consultants, tenants
from pagedkv_edu.viz.routing_view import RoutingPicture, RoutingState, frame_of, routing_svg
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

REQUESTS = tenants(40, 60.0, 0, num_tenants=6)


def test_the_state_model_routes_the_requests_that_arrived() -> None:
    state = RoutingState(REQUESTS, "prefix-affinity", 3, arrived=25, num_blocks=512)
    frame = state.frame()
    assert sum(v.served for v in frame.replicas) == 25 and len(frame.replicas) == 3
    full = route(REQUESTS, "prefix-affinity", 3, num_blocks=512)
    assert frame.chosen == full.outcomes[24].replica and frame.hit_tokens == full.outcomes[24].hit_tokens   # causal
    assert frame.request_id == state.requests[24].request_id
    for view in frame.replicas:
        assert 0 <= view.used_blocks + view.cached_free_blocks <= view.num_blocks == 512
        assert view.waiting + view.prefilling + view.decoding <= view.served
    assert any(view.cached_groups for view in frame.replicas)


def test_controls_change_the_frame() -> None:
    state = RoutingState(consultants(30, 200.0), "round-robin", 4)
    assert [v.served for v in state.frame().replicas] == [8, 8, 7, 7]
    state.set_policy("prefix-affinity")
    assert [v.served for v in state.frame().replicas] == [30, 0, 0, 0]     # one shared prompt: one replica
    state.set_replicas(2)
    state.seek(1)
    assert [v.served for v in state.frame().replicas] == [1, 0]
    for bad in (lambda: state.seek(0), lambda: state.seek(31), lambda: state.set_replicas(0),
                lambda: state.set_policy("random")):
        with pytest.raises(ValueError):
            bad()
    assert (state.policy, state.num_replicas, state.arrived) == ("prefix-affinity", 2, 1)    # unchanged


def test_svg_is_deterministic_and_shows_each_replica() -> None:
    frame = RoutingState(REQUESTS, "hybrid", 4, num_blocks=256).frame()
    svg = routing_svg(frame)
    assert svg == routing_svg(RoutingState(REQUESTS, "hybrid", 4, num_blocks=256).frame())
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "<defs" not in svg
    assert len(re.findall(r'<g class="replica"', svg)) == 4
    assert f"→ replica {frame.chosen}" in svg and "tenant" in svg
    assert RoutingPicture(frame)._repr_svg_() == svg


def test_frame_of_a_finished_run() -> None:
    run = route(REQUESTS[:10], "least-loaded", 2)
    frame = frame_of(run, sorted(REQUESTS[:10], key=lambda r: r.arrival_ms)[-1])
    assert frame.policy == "least-loaded" and sum(v.served for v in frame.replicas) == 10


def test_widget_headless() -> None:
    pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.routing_widget import RoutingWidget

    widget = RoutingWidget(consultants(20, 100.0), "round-robin", 3)
    before = widget.drawing.value
    assert before.count('<g class="replica"') == 3
    widget.policy.value = "prefix-affinity"
    assert widget.state.policy == "prefix-affinity" and widget.drawing.value != before
    widget.replicas.value = 5
    assert widget.drawing.value.count('<g class="replica"') == 5
    widget.arrived.value = 4
    assert widget.state.arrived == 4
    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"] == widget.drawing.value and "5 replicas" in bundle["text/plain"]


def test_the_picture_and_the_widget_speak_zh_tw(zh_tw: None) -> None:
    pytest.importorskip("ipywidgets")
    from pagedkv_edu.viz.routing_widget import RoutingWidget

    busy = RoutingState(tenants(120, 5000.0, 0, num_tenants=30), "round-robin", 2, num_blocks=256).frame()
    for frame in (RoutingState(REQUESTS, "hybrid", 4, num_blocks=256).frame(), busy):
        svg = routing_svg(frame)
        text = "\n".join(re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S))
        assert untranslated(text) == [] and f"→ 副本 {frame.chosen}" in text and "已服務" in text
    assert re.search(r"等待 \d+（\+\d+），解碼", routing_svg(busy))    # more waiting than squares
    widget = RoutingWidget(consultants(20, 100.0), "round-robin", 3)
    assert (widget.policy.description, widget.replicas.description, widget.arrived.description) == \
        ("路由策略", "副本數", "已抵達")
    widget.replicas.value = 2
    assert widget.drawing.value.count("副本 1") and "2 個副本" in widget._repr_mimebundle_()["text/plain"]
