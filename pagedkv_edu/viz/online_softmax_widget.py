"""The online-softmax widget: change the keys, the tile size and the splits; step through the tiles.

A thin view over :class:`~.online_softmax_view.OnlineSoftmaxState`: every control calls one setter and
redraws. A refused combination (more splits than tiles, a tile that is not a power of two) shows the
model's message, puts the control back and keeps the last picture. Where no kernel runs,
``_repr_mimebundle_`` carries the current picture as static SVG.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as widgets

from .language import tr
from .online_softmax_view import (MAX_KEYS, MAX_SPLITS, MIN_KEYS, PATTERN_LABELS, SCORE_PATTERNS, TILE_SIZES,
                                  OnlineSoftmaxState, softmax_svg)

MESSAGE_STYLE = "color:#B2182B;font-weight:bold"   # en: not shown to readers


class OnlineSoftmaxWidget(widgets.VBox):
    """Controls over an :class:`OnlineSoftmaxState`, its picture, and a line for refusals."""

    def __init__(self, num_keys: int = 32, tile_n: int = 8, num_splits: int = 2, seed: int = 0,
                 pattern: str = "rising", step: int = 0, *, head_dim: int = 4) -> None:
        self.state = OnlineSoftmaxState(num_keys, tile_n, num_splits, seed, pattern, step, head_dim=head_dim)
        s = self.state
        # Labels in the reader's language (a trait keeps a str's English value, so each is rendered here).
        self.step = widgets.IntSlider(value=s.step, min=0, max=s.num_tiles - 1, description=str(tr("tile")),
                                      layout=widgets.Layout(width="420px"))
        self.tile_n = widgets.Dropdown(options=list(TILE_SIZES), value=s.tile_n, description=str(tr("tile size")))
        self.num_splits = widgets.IntSlider(value=s.num_splits, min=1, max=MAX_SPLITS, description=str(tr("splits")))
        self.num_keys = widgets.IntSlider(value=s.num_keys, min=MIN_KEYS, max=MAX_KEYS, description=str(tr("keys")),
                                          continuous_update=False)
        self.seed = widgets.IntSlider(value=s.seed, min=0, max=20, description=str(tr("seed")),
                                      continuous_update=False)
        self.pattern = widgets.Dropdown(options=[(str(PATTERN_LABELS[p]), p) for p in SCORE_PATTERNS], value=s.pattern,
                                        description=str(tr("scores")))
        self.drawing = widgets.HTML()
        self.message = widgets.HTML()
        self._syncing = False   # True while the view itself moves a control back onto the state
        for control, setter in ((self.step, s.seek), (self.tile_n, s.set_tile_n), (self.num_splits, s.set_num_splits),
                                (self.num_keys, s.set_num_keys), (self.seed, s.set_seed),
                                (self.pattern, s.set_pattern)):
            control.observe(self._handler(setter), names="value")
        super().__init__(children=[widgets.HBox([self.step, self.tile_n]),
                                   widgets.HBox([self.num_splits, self.num_keys]),
                                   widgets.HBox([self.seed, self.pattern]),
                                   self.message, self.drawing])
        self._refresh()

    def _handler(self, setter: Callable[[Any], None]) -> Callable[[dict[str, Any]], None]:
        def on_change(change: dict[str, Any]) -> None:
            if self._syncing:
                return
            try:
                setter(change["new"])
            except ValueError as refusal:      # the state is unchanged: say why, keep the picture
                self.message.value = f'<span style="{MESSAGE_STYLE}">{escape(str(refusal))}</span>'  # en: not shown to readers
                self._sync_controls()
                return
            self.message.value = ""
            self._refresh()
        return on_change

    def _sync_controls(self) -> None:
        """Put every control on the state's value (a refused one back, the step on the remaining tiles)."""
        self._syncing = True
        try:
            s = self.state
            self.step.max = s.num_tiles - 1
            for control, value in ((self.step, s.step), (self.tile_n, s.tile_n), (self.num_splits, s.num_splits),
                                   (self.num_keys, s.num_keys), (self.seed, s.seed), (self.pattern, s.pattern)):
                control.value = value
        finally:
            self._syncing = False

    def _refresh(self) -> None:
        self._sync_controls()
        self.drawing.value = softmax_svg(self.state)

    def redraw_cases(self) -> list[tuple[str, object]]:
        """(control, value) pairs that each change the picture, from the default state, in order."""
        return [("step", 3), ("tile_n", 4), ("num_splits", 3), ("pattern", "near 1,000"), ("num_keys", 20),
                ("seed", 7)]

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["image/svg+xml"] = softmax_svg(self.state)
        bundle["text/plain"] = str(self.state.summary())
        return bundle
