"""The scheduler lab's widget: set the token budget, the watermark, the seats, the KV budget and the memory, and
watch a fresh run of chapter 6's workload (its replay, step by step, and its metrics).

Thin on purpose: every change calls :class:`~.scheduler_lab.SchedulerLab`, which reruns the engine, and the
picture is redrawn whole by the pure :func:`~.scheduler_lab.scheduler_svg`. A refused value shows its reason in
``message``, puts the control back on the value the picture was drawn with, and keeps the picture. Where no
kernel runs, ``_repr_mimebundle_`` carries the current picture as static SVG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any

import ipywidgets as widgets

from ..engine.config import POLICIES
from ..sim.decode_cost import StepCost
from ..workload import Request
from .language import tr
from .render import ERROR_COLOUR
from .scheduler_lab import SchedulerLab, SchedulerSettings, memory_label

NO_CAP = 0
"""What a slider holds for "no cap" (ipywidgets' sliders cannot hold None); the engine's setting is then None."""
TOKEN_BUDGETS: tuple[int, ...] = (16, 32, 64, 128, 256, NO_CAP)
WATERMARKS: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3)
SEATS: tuple[int, ...] = (2, 4, 8, 16, 32, NO_CAP)
KV_BUDGETS: tuple[int, ...] = (32, 48, 64, 128, 256, 384, 640, 1024)   # 32 holds no request; 48 no reservation


def _cap(value: int | None) -> int:
    return NO_CAP if value is None else value


def _uncap(value: int) -> int | None:
    return None if value == NO_CAP else value


def _options(values: Sequence[Any], current: Any, label: Callable[[Any], str] = str) -> list[tuple[str, Any]]:
    """The slider's (label, value) pairs, the state's own value added if it is not among them (a caller's setting)."""
    chosen = list(values) if current in values else sorted([*values, current])
    return [(label(v), v) for v in chosen]


def _cap_options(values: Sequence[int], current: int | None) -> list[tuple[str, int]]:
    """As :func:`_options`, for a cap: "no cap" last, where a slider's largest value goes."""
    finite = [v for v in values if v != NO_CAP]
    return _options(finite, finite[0] if current is None else current) + [(str(tr("no cap")), NO_CAP)]


class SchedulerWidget(widgets.VBox):
    """Controls over a :class:`SchedulerLab`, its picture, and a line for refusals."""

    def __init__(self, settings: SchedulerSettings | None = None, *, index: int | None = None,
                 requests: Sequence[Request] | None = None, cost: StepCost | None = None) -> None:
        self.state = SchedulerLab(settings, requests=requests, cost=cost, index=index)
        s = self.state.settings
        wide = widgets.Layout(width="330px")
        self.memory = widgets.Dropdown(options=[(str(memory_label(p)), p) for p in POLICIES], value=s.memory,
                                       description=str(tr("memory")),
                                       layout=widgets.Layout(width="220px"))
        self.token_budget = widgets.SelectionSlider(
            options=_cap_options(TOKEN_BUDGETS, s.max_num_batched_tokens),
            value=_cap(s.max_num_batched_tokens), description=str(tr("token budget")), continuous_update=False,
            layout=wide)
        self.watermark = widgets.SelectionSlider(options=_options(WATERMARKS, s.watermark, lambda v: f"{v:g}"),
                                                 value=s.watermark, description=str(tr("watermark")),
                                                 continuous_update=False, layout=wide)
        self.max_num_seqs = widgets.SelectionSlider(options=_cap_options(SEATS, s.max_num_seqs),
                                                    value=_cap(s.max_num_seqs), description=str(tr("seats")),
                                                    continuous_update=False, layout=wide)
        self.kv_budget = widgets.SelectionSlider(options=_options(KV_BUDGETS, s.kv_budget_tokens),
                                                 value=s.kv_budget_tokens, description=str(tr("KV tokens")),
                                                 continuous_update=False, layout=wide)
        self.step = widgets.IntSlider(value=self.state.index, min=0, max=self.state.num_frames - 1,
                                      description=str(tr("step")), layout=widgets.Layout(width="560px"))
        for control in (self.memory, self.token_budget, self.watermark, self.max_num_seqs, self.kv_budget, self.step):
            control.style.description_width = "90px"
        self.message = widgets.HTML()
        self.drawing = widgets.HTML()
        self._syncing = False
        lab = self.state
        self.memory.observe(lambda ch: self._do(lab.set_memory, ch["new"]), names="value")
        self.token_budget.observe(lambda ch: self._do(lab.set_token_budget, _uncap(ch["new"])), names="value")
        self.watermark.observe(lambda ch: self._do(lab.set_watermark, ch["new"]), names="value")
        self.max_num_seqs.observe(lambda ch: self._do(lab.set_max_num_seqs, _uncap(ch["new"])), names="value")
        self.kv_budget.observe(lambda ch: self._do(lab.set_kv_budget, ch["new"]), names="value")
        self.step.observe(lambda ch: self._do(lab.seek, ch["new"]), names="value")
        super().__init__(children=[widgets.HBox([self.memory, self.token_budget, self.watermark]),
                                   widgets.HBox([self.max_num_seqs, self.kv_budget]), self.step, self.message,
                                   self.drawing])
        self._refresh()

    def redraw_cases(self) -> list[tuple[str, object]]:
        """(control, value) pairs that each change the picture, applied in order from the default settings."""
        return [("token_budget", 128), ("watermark", 0.1), ("max_num_seqs", 8), ("kv_budget", 384),
                ("memory", "contiguous"), ("step", 0 if self.state.index else 1)]

    def _do(self, action: Callable[[Any], None], value: Any) -> None:
        if self._syncing:          # the widget itself is putting a control back: not a reader's change
            return
        try:
            action(value)
        except ValueError as exc:  # nothing changed in the state: say why, and show the controls as drawn
            self.message.value = (f'<span class="refusal" style="color:{ERROR_COLOUR}">'  # en: not shown to readers
                                  f'{tr("refused: {reason}", reason=escape(str(exc)))}</span>')
            self._sync_controls()
            return
        self.message.value = ""
        self._refresh()

    def _sync_controls(self) -> None:
        """Every control on the state's value, the step slider on the run's length, without rerunning."""
        s, self._syncing = self.state.settings, True
        try:
            self.memory.value = s.memory
            self.token_budget.value = _cap(s.max_num_batched_tokens)
            self.watermark.value = s.watermark
            self.max_num_seqs.value = _cap(s.max_num_seqs)
            self.kv_budget.value = s.kv_budget_tokens
            self.step.max = self.state.num_frames - 1
            self.step.value = self.state.index
        finally:
            self._syncing = False

    def _refresh(self) -> None:
        self._sync_controls()
        self.drawing.value = self.state.svg()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["image/svg+xml"] = self.state.svg()
        bundle["text/plain"] = str(tr("scheduler lab: {caption}; step {step} of {steps}, {preemptions} preemptions",
                                      caption=self.state.settings.caption, step=self.state.index + 1,
                                      steps=self.state.num_frames, preemptions=self.state.run.preemptions))
        return bundle


__all__ = ["KV_BUDGETS", "NO_CAP", "SEATS", "SchedulerWidget", "TOKEN_BUDGETS", "WATERMARKS"]
