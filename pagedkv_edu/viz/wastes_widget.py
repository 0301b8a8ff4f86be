"""The three-wastes widget: pick a reservation policy, an allocator, a KV budget and ``max_seq_len``; the run reruns.

Every change passes all four controls to the state model at once, so a combination the model
refuses (a budget that cannot hold one reservation) is shown in ``message`` while the picture
keeps the last accepted run, and the reader's next change can make the same values valid again.
Where no kernel runs, ``_repr_mimebundle_`` carries the current picture as static SVG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

import ipywidgets as widgets

from ..sim.contiguous import ALLOCATORS, RESERVE_POLICIES
from ..workload import MAX_SEQ_LEN, Request
from .language import tr
from .render import ERROR_COLOUR
from .wastes_view import ALLOCATOR_LABELS, SYSTEM_LABELS, WastesState, wastes_svg

BUDGET_STEP = 1024          # the budget slider's step, in slots: half a 2,048-slot reservation
SEQ_LEN_STEP = 256


class WastesWidget(widgets.VBox):
    """Controls over a :class:`WastesState`, its picture, and a line for a refused combination."""

    def __init__(self, requests: Iterable[Request], paper: Mapping[str, float], policy: str = "max",
                 allocator: str = "first-fit", budget: int = 10 * MAX_SEQ_LEN,
                 max_seq_len: int = MAX_SEQ_LEN) -> None:
        self.state = WastesState(requests, paper, policy, allocator, budget, max_seq_len)
        # Labels in the reader's language (a trait keeps a str's English value, so each is rendered here).
        self.policy = widgets.Dropdown(options=[(f"Orca ({SYSTEM_LABELS[p]})", p) for p in RESERVE_POLICIES],
                                       value=self.state.policy, description=str(tr("reserve")))
        self.allocator = widgets.Dropdown(options=[(str(ALLOCATOR_LABELS[a]), a) for a in ALLOCATORS],
                                          value=self.state.allocator, description=str(tr("allocator")))
        self.budget = widgets.IntSlider(value=self.state.budget, min=BUDGET_STEP,
                                        max=max(40 * BUDGET_STEP, self.state.budget), step=BUDGET_STEP,
                                        description=str(tr("KV budget")), continuous_update=False,
                                        layout=widgets.Layout(width="420px"))
        self.max_seq_len = widgets.IntSlider(value=self.state.max_seq_len, min=4 * SEQ_LEN_STEP,
                                             max=max(16 * SEQ_LEN_STEP, self.state.max_seq_len), step=SEQ_LEN_STEP,
                                             description="max_seq_len", continuous_update=False,
                                             layout=widgets.Layout(width="420px"))
        self.message = widgets.HTML()
        self.drawing = widgets.HTML(wastes_svg(self.state.frame()))
        for control in (self.policy, self.allocator, self.budget, self.max_seq_len):
            control.observe(self._apply, names="value")
        super().__init__(children=[widgets.HBox([self.policy, self.allocator]),
                                   widgets.HBox([self.budget, self.max_seq_len]), self.message, self.drawing])

    def _apply(self, _change: object = None) -> None:
        """Rerun with every control's value; on a refusal, say why and keep the last picture."""
        try:
            self.state.update(policy=self.policy.value, allocator=self.allocator.value, budget=self.budget.value,
                              max_seq_len=self.max_seq_len.value)
        except ValueError as exc:
            note = tr("{reason}. The picture still shows the last accepted setting.", reason=str(exc))
            self.message.value = f'<span style="color:{ERROR_COLOUR}">{escape(str(note))}</span>'  # en: not shown to readers
            return
        self.message.value = ""
        self.drawing.value = wastes_svg(self.state.frame())

    def redraw_cases(self) -> list[tuple[str, object]]:
        """Control changes that each redraw the picture, applied in order from the default setting."""
        return [("policy", "oracle"), ("allocator", "buddy"), ("budget", 12 * BUDGET_STEP), ("policy", "max"),
                ("max_seq_len", 3 * MAX_SEQ_LEN // 2)]

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        frame = self.state.frame()
        bundle["image/svg+xml"] = wastes_svg(frame)
        bundle["text/plain"] = str(tr("wastes widget: Orca ({system}), {allocator}, budget {budget:,}, max_seq_len "
                                      "{max_seq_len:,}: {share:.1%} of the held slots hold tokens",
                                      system=SYSTEM_LABELS[frame.policy], allocator=ALLOCATOR_LABELS[frame.allocator],
                                      budget=frame.budget, max_seq_len=frame.max_seq_len, share=frame.utilisation))
        return bundle
