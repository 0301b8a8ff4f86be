"""The block-table explorer: an ipywidgets view over :class:`ExplorerState` (chapters 2 and 7).

Every click re-renders the whole picture from a fresh snapshot. ``_repr_mimebundle_`` also
carries a static SVG of the state, for pages where no kernel runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

import ipywidgets as widgets

from ..core.block_manager import BlockManager
from .explorer_state import ExplorerState, ManagerFactory
from .language import tr
from .render import Picture, render_svg, request_label


class BlockExplorer(widgets.VBox):
    """Add requests, decode, fork, finish, and watch blocks move between the pool and the tables.

    ``fork=False`` leaves the fork button out: chapter 2 shows the explorer before chapter 7
    teaches sharing. ``block_manager`` builds the manager over the explorer's pool (see
    :class:`ExplorerState`): chapter 2 passes the reader's class once it passed its grader.

    Labels are in the reader's language when the widget is built; the state's messages, when shown.
    """

    def __init__(
        self,
        num_blocks: int = 16,
        block_size: int = 4,
        *,
        free_order: Sequence[int] | None = None,
        max_seq_len: int | None = None,
        prompt_tokens: int = 7,
        steps: int = 4,
        fork: bool = True,
        block_manager: ManagerFactory = BlockManager.over,
    ) -> None:
        self.state = ExplorerState(num_blocks, block_size, free_order=free_order, max_seq_len=max_seq_len,
                                   block_manager=block_manager)
        self.prompt_tokens = widgets.BoundedIntText(value=prompt_tokens, min=1, max=1_000_000,
                                                    description=str(tr("prompt")),
                                                    layout=widgets.Layout(width="150px"))
        self.add_button = widgets.Button(description=str(tr("add request")),
                                         tooltip=str(tr("admit a request (prefill)")))
        self.step_button = widgets.Button(description=str(tr("decode step")),
                                          tooltip=str(tr("every request +1 token")))
        self.steps = widgets.BoundedIntText(value=steps, min=1, max=100_000, description="N",
                                            layout=widgets.Layout(width="120px"))
        self.step_n_button = widgets.Button(description=str(tr("step ×N")), tooltip=str(tr("N decode steps")))
        self.request_choice = widgets.Dropdown(options=[], description=str(tr("request")),
                                               layout=widgets.Layout(width="170px"))
        self.finish_button = widgets.Button(description=str(tr("finish")),
                                            tooltip=str(tr("return the request's blocks")))
        self.fork_button = widgets.Button(description=str(tr("fork")),
                                          tooltip=str(tr("a new sample sharing the request's blocks")))
        self.block_size_slider = widgets.IntSlider(value=block_size, min=1, max=max(32, block_size),
                                                   description=str(tr("block size")), continuous_update=False)
        self.pool_size_slider = widgets.IntSlider(value=num_blocks, min=1, max=max(64, num_blocks),
                                                  description=str(tr("pool blocks")), continuous_update=False)
        self.counters = widgets.Label()
        self.drawing = widgets.HTML()
        self.event_log = widgets.HTML()

        self.add_button.on_click(lambda _: self._do(self.state.add_request, self.prompt_tokens.value))
        self.step_button.on_click(lambda _: self._do(self.state.decode_step))
        self.step_n_button.on_click(lambda _: self._do(self.state.step_n, self.steps.value))
        self.finish_button.on_click(lambda _: self._do(self.state.finish, self.request_choice.value))
        self.fork_button.on_click(lambda _: self._do(self.state.fork, self.request_choice.value))
        self.block_size_slider.observe(lambda ch: self._do(self.state.set_block_size, ch["new"]), names="value")
        self.pool_size_slider.observe(lambda ch: self._do(self.state.set_pool_size, ch["new"]), names="value")

        super().__init__(children=[
            widgets.HBox([self.prompt_tokens, self.add_button, self.step_button, self.steps, self.step_n_button]),
            widgets.HBox([self.request_choice, self.finish_button, *([self.fork_button] if fork else [])]),
            widgets.HBox([self.block_size_slider, self.pool_size_slider]),
            self.counters,
            self.drawing,
            self.event_log,
        ])
        self._refresh()

    def _do(self, action: Any, *args: Any) -> None:
        action(*args)
        self._refresh()

    def _refresh(self) -> None:
        """Re-render everything from one snapshot; keep sliders on the state's sizes."""
        snap = self.state.snapshot()
        self.counters.value = str(snap.summary())
        self.drawing.value = render_svg(snap)
        recent = "\n".join(str(event) for event in snap.events[-6:])
        self.event_log.value = f'<pre style="font-size:11px;line-height:1.3;margin:0">{escape(recent)}</pre>'  # en: not shown to readers
        live = self.state.live_requests
        chosen = self.request_choice.value if self.request_choice.value in live else (live[0] if live else None)
        self.request_choice.options = [(request_label(r), r) for r in live]
        self.request_choice.value = chosen
        # A refused resize leaves the state as it was: put the slider back (a no-op event).
        self.block_size_slider.value = self.state.block_size
        self.pool_size_slider.value = self.state.num_blocks

    def picture(self) -> Picture:
        """A static picture of the current state, for a cell of its own."""
        return Picture(self.state.snapshot())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        snap = self.state.snapshot()
        bundle["image/svg+xml"] = render_svg(snap)
        bundle["text/plain"] = str(snap.summary())
        return bundle
