"""The routing lab: change the workload, the arrival rate, the hybrid's thresholds or the pool, and every policy reruns.

A thin view over :class:`~pagedkv_edu.viz.routing_lab.RoutingLabState`: each control's change goes to
:meth:`~pagedkv_edu.viz.routing_lab.RoutingLabState.configure`. A refused change shows its reason in
``message``, puts the control back to the value the picture was drawn with, and keeps the picture.
Where no kernel runs, ``_repr_mimebundle_`` carries the current picture as static SVG.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as widgets

from ..sim.routing import HybridThresholds
from .language import tr
from .render import ERROR_COLOUR
from .routing_lab import (BLOCK_OPTIONS, LAB_WORKLOADS, THRESHOLD_NAMES, RoutingLabState, data_state,
                          routing_lab_svg, workload_label)


class RoutingLabWidget(widgets.VBox):
    """Controls over a :class:`RoutingLabState`, its picture, and a message that is empty unless a change was refused."""

    def __init__(self, workload: str = "tenants", rate_per_s: float = 600.0, num_blocks: int = 3072,
                 thresholds: HybridThresholds = HybridThresholds(), **state_kwargs: Any) -> None:
        self.state = RoutingLabState(workload, rate_per_s, num_blocks, thresholds, **state_kwargs)
        inputs, limits = self.state.inputs, self.state.inputs.thresholds
        narrow = {"style": {"description_width": "110px"}, "layout": widgets.Layout(width="360px")}
        self.workload = widgets.Dropdown(options=[(str(workload_label(w)), w) for w in LAB_WORKLOADS],
                                         value=inputs.workload, description=str(tr("workload")), **narrow)
        self.rate = widgets.SelectionSlider(options=[(f"{r:,.0f}/s", r) for r in self.state.rates],
                                            value=inputs.rate_per_s, description=str(tr("arrival rate")),
                                            continuous_update=False, **narrow)
        blocks = sorted({*BLOCK_OPTIONS, inputs.num_blocks})
        self.blocks = widgets.SelectionSlider(options=[(f"{b:,}", b) for b in blocks], value=inputs.num_blocks,
                                              description=str(tr("blocks/replica")), continuous_update=False,
                                              **narrow)
        self.cache_threshold = widgets.FloatSlider(value=limits.cache_threshold, min=0.0, max=1.0, step=0.05,
                                                   description="cache_threshold", continuous_update=False, **narrow)
        self.abs_threshold = widgets.IntSlider(value=limits.abs_threshold, min=0, max=max(64, limits.abs_threshold),
                                               description="abs_threshold", continuous_update=False, **narrow)
        self.rel_threshold = widgets.FloatSlider(value=limits.rel_threshold, min=1.0,
                                                 max=max(4.0, limits.rel_threshold), step=0.1,
                                                 description="rel_threshold", continuous_update=False, **narrow)
        self.drawing = widgets.HTML()
        self.message = widgets.HTML()
        self._controls: dict[str, widgets.ValueWidget] = {
            "workload": self.workload, "rate_per_s": self.rate, "num_blocks": self.blocks,
            "cache_threshold": self.cache_threshold, "abs_threshold": self.abs_threshold,
            "rel_threshold": self.rel_threshold}
        self._syncing = False       # True while a refused control is put back: that change is not the reader's
        for name, control in self._controls.items():
            control.observe(lambda change, name=name: self._change(name, change["new"]), names="value")
        super().__init__(children=[
            widgets.HBox([widgets.VBox([self.workload, self.rate, self.blocks]),
                          widgets.VBox([self.cache_threshold, self.abs_threshold, self.rel_threshold])]),
            self.message, self.drawing])
        self.drawing.value = routing_lab_svg(self.state.frame)

    def _change(self, name: str, value: Any) -> None:
        if self._syncing:
            return
        try:
            frame = self.state.configure(**{name: value})
        except ValueError as exc:
            self.message.value = (f'<span style="color:{ERROR_COLOUR}">'  # en: not shown to readers
                                  f'{tr("Refused, nothing rerun: {reason}", reason=escape(str(exc)))}</span>')
            self._put_back(name)
            return
        self.message.value = ""
        self.drawing.value = routing_lab_svg(frame)

    def _put_back(self, name: str) -> None:
        """Show on a refused control the value the picture was drawn with."""
        inputs = self.state.inputs
        current = {"workload": inputs.workload, "rate_per_s": inputs.rate_per_s, "num_blocks": inputs.num_blocks,
                   **{k: getattr(inputs.thresholds, k) for k in THRESHOLD_NAMES}}
        self._syncing = True
        try:
            self._controls[name].value = current[name]
        finally:
            self._syncing = False

    def redraw_cases(self) -> list[tuple[str, object]]:
        """(control attribute, new value) pairs that each change the picture, applied in order from the default state."""
        return [("workload", "consultants"), ("rate", 2500.0), ("workload", "tenants"), ("blocks", 512),
                ("cache_threshold", 0.0)]

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["image/svg+xml"] = routing_lab_svg(self.state.frame)
        bundle["text/plain"] = str(tr("routing lab: {state}", state=data_state(self.state.frame)))
        return bundle
