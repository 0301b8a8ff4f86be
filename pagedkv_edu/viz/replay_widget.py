"""The replay widget: play/pause, a step slider and a request picker over :class:`ReplayState`.

Thin on purpose, like the explorer: every change calls the state model, then the frame is
redrawn whole by the pure renderer. ``widgets.Play`` is linked to the slider in the browser
(``jslink``), so playing needs no round trip per frame to start; the slider's change still
reaches the kernel, which draws the frame. Where no kernel runs, ``_repr_mimebundle_`` carries
the current frame as static SVG.
"""

from __future__ import annotations

from collections.abc import Hashable
from html import escape
from typing import Any

import ipywidgets as widgets

from .language import tr
from .trace import EngineTrace
from .render import request_label
from .replay import ReplayState, frame_svg


class ReplayWidget(widgets.VBox):
    """Step through a recorded run; pick a request to see its blocks and its text."""

    def __init__(self, trace: EngineTrace, *, index: int = 0, selected: Hashable | None = None,
                 interval_ms: int = 250) -> None:
        self.state = ReplayState(trace, index, selected)
        last = self.state.num_frames - 1
        self.play = widgets.Play(value=index, min=0, max=last, step=1, interval=interval_ms, description=str(tr("play")))
        self.slider = widgets.IntSlider(value=index, min=0, max=last, description=str(tr("step")),
                                        continuous_update=True, layout=widgets.Layout(width="480px"))
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.picker = widgets.Dropdown(options=[(request_label(s), s) for s in trace.seq_ids],
                                       value=self.state.selected, description=str(tr("request")),
                                       layout=widgets.Layout(width="180px"))
        self.drawing = widgets.HTML()
        self.text = widgets.HTML()
        self.slider.observe(lambda change: self._do(self.state.seek, change["new"]), names="value")
        self.picker.observe(lambda change: self._do(self.state.select, change["new"]), names="value")
        super().__init__(children=[widgets.HBox([self.play, self.slider, self.picker]), self.drawing, self.text])
        self._refresh()

    def _do(self, action: Any, value: Any) -> None:
        action(value)
        self._refresh()

    def _refresh(self) -> None:
        self.drawing.value = self.state.svg()
        prompt, reply = self.state.text()
        self.text.value = (f'<div class="replay-text" style="font-size:12px;max-height:12em;overflow:auto">'  # en: not shown to readers
                           f'<b>{escape(request_label(self.state.selected))}</b> '
                           f'<span style="color:#555">{escape(prompt[-400:])}</span>'
                           f'<b> → </b><span class="reply">{escape(reply)}</span></div>')

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["image/svg+xml"] = frame_svg(self.state.trace, self.state.index, self.state.selected)
        bundle["text/plain"] = str(tr("replay of {steps} steps, at step {step}", steps=self.state.num_frames,
                                      step=self.state.index + 1))
        return bundle


__all__ = ["ReplayWidget", "EngineTrace"]
