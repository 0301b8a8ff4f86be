"""The routing widget: pick a policy, a number of replicas and a moment; see each replica's cache and queue.

Where no kernel runs, ``_repr_mimebundle_`` carries the current frame as static SVG.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from ..sim.routing import MAX_REPLICAS, POLICIES
from ..sim.routing_workloads import TimedRequest
from .language import tr
from .routing_view import RoutingState, routing_svg


class RoutingWidget(widgets.VBox):
    """Controls over a :class:`RoutingState`, and its picture."""

    def __init__(self, requests: Sequence[TimedRequest], policy: str = "hybrid", num_replicas: int = 4,
                 arrived: int | None = None, **route_kwargs: object) -> None:
        self.state = RoutingState(requests, policy, num_replicas, arrived, **route_kwargs)
        # "{routing}" is empty: the label is the *routing* policy, which the catalogue must tell from chapter 6's
        # "policy" (the scheduling policy), keyed by the same English word
        self.policy = widgets.Dropdown(options=list(POLICIES), value=self.state.policy,
                                       description=str(tr("routing policy")))
        self.replicas = widgets.IntSlider(value=self.state.num_replicas, min=1, max=min(8, MAX_REPLICAS),
                                          description=str(tr("replicas")))
        self.arrived = widgets.IntSlider(value=self.state.arrived, min=1, max=len(self.state.requests),
                                         description=str(tr("arrived")), continuous_update=False,
                                         layout=widgets.Layout(width="420px"))
        self.drawing = widgets.HTML()
        self.policy.observe(lambda change: self._do(self.state.set_policy, change["new"]), names="value")
        self.replicas.observe(lambda change: self._do(self.state.set_replicas, change["new"]), names="value")
        self.arrived.observe(lambda change: self._do(self.state.seek, change["new"]), names="value")
        super().__init__(children=[widgets.HBox([self.policy, self.replicas]), self.arrived, self.drawing])
        self._refresh()

    def _do(self, action: Any, value: Any) -> None:
        action(value)
        self._refresh()

    def _refresh(self) -> None:
        self.drawing.value = routing_svg(self.state.frame())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["image/svg+xml"] = routing_svg(self.state.frame())
        bundle["text/plain"] = str(tr("routing widget: {policy}, {replicas} replicas, {arrived} requests arrived",
                                      policy=self.state.policy, replicas=self.state.num_replicas,
                                      arrived=self.state.arrived))
        return bundle
