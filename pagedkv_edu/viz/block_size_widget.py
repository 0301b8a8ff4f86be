"""The block-size widget: move the block size, the shared prefix or the device; see the four costs move.

A thin view over :class:`~pagedkv_edu.viz.block_size_view.BlockSizeState`: each control calls one
setter, and a value the state refuses is shown in ``message`` while the picture keeps the last
accepted setting. Where no kernel runs, ``_repr_mimebundle_`` carries the current picture as static SVG.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as widgets

from .block_size_view import DEVICES, BlockSizeState, block_size_svg, device_label
from .language import tr
from .render import ERROR_COLOUR

PREFIX_STEP = 8   # the shared-prefix slider's step: fine enough to land on either side of a block boundary


class BlockSizeWidget(widgets.VBox):
    """Controls over a :class:`BlockSizeState`, its picture, and a line for a refused value."""

    def __init__(self, state: BlockSizeState | None = None) -> None:
        """``state`` is the model to drive (the chapter's 50 consultants when None): the sweep behind it takes
        seconds, so a notebook or a test that already holds one passes it rather than sweeping again."""
        self.state = BlockSizeState() if state is None else state
        longest = max(r.prompt_len for r in self.state.requests)
        # Labels in the reader's language (a trait keeps a str's English value, so each is rendered here).
        self.block_size = widgets.SelectionSlider(options=list(self.state.block_sizes), value=self.state.block_size,
                                                  description=str(tr("block size")),
                                                  layout=widgets.Layout(width="360px"))
        # The slider reaches the longest prompt, past the shortest: the values in between are refused, and say why.
        self.shared_prefix = widgets.IntSlider(value=self.state.shared_prefix, min=0, max=longest, step=PREFIX_STEP,
                                               description=str(tr("shared prefix")), continuous_update=False,
                                               layout=widgets.Layout(width="360px"))
        self.device = widgets.Dropdown(options=[(str(device_label(key)), key) for key in DEVICES],
                                       value=self.state.device, description=str(tr("device")),
                                       layout=widgets.Layout(width="300px"))
        self.message = widgets.HTML()
        self.drawing = widgets.HTML()
        self._reverting = False
        self._watch(self.block_size, self.state.set_block_size, "block_size")
        self._watch(self.shared_prefix, self.state.set_shared_prefix, "shared_prefix")
        self._watch(self.device, self.state.set_device, "device")
        super().__init__(children=[widgets.HBox([self.block_size, self.shared_prefix]), self.device, self.message,
                                   self.drawing])
        self._refresh()

    def redraw_cases(self) -> list[tuple[str, object]]:
        """(control, value) pairs that each change the picture, in order from the default setting."""
        return [("block_size", 64), ("shared_prefix", 512), ("device", "h200"), ("block_size", 256)]

    def _watch(self, control: widgets.ValueWidget, setter: Callable[[Any], None], attribute: str) -> None:
        control.observe(lambda change: self._set(control, setter, attribute, change["new"]), names="value")

    def _set(self, control: widgets.ValueWidget, setter: Callable[[Any], None], attribute: str, value: Any) -> None:
        """Apply one control's value; on a refusal, say why and put the control back on the state's value."""
        if self._reverting:
            return
        try:
            setter(value)
        except ValueError as exc:
            note = tr("Refused: {reason}. The picture still shows the last accepted setting.", reason=str(exc))
            self.message.value = f'<span style="color:{ERROR_COLOUR}">{escape(str(note))}</span>'  # en: not shown to readers
            self._reverting = True
            try:
                control.value = getattr(self.state, attribute)
            finally:
                self._reverting = False
            return
        self.message.value = ""
        self._refresh()

    def _refresh(self) -> None:
        self.drawing.value = block_size_svg(self.state.frame())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        frame = self.state.frame()
        bundle["image/svg+xml"] = block_size_svg(frame)
        bundle["text/plain"] = str(tr("block-size widget: {summary}", summary=frame.summary()))
        return bundle
