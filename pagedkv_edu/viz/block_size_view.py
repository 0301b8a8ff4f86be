"""Chapter 9's trade-off, rerun: four costs over every block size, the chosen size marked.

:class:`BlockSizeState` is the state model (a workload, a block size, a shared-prefix length and a
device), :meth:`BlockSizeState.frame` reads a :class:`BlockSizeFrame` from it, and
:func:`block_size_svg` draws that frame, a pure function; :mod:`.block_size_widget` only drives the
state. :func:`block_size_grid` draws several settings side by side, the book's still.

Each curve comes from the experiment the chapter runs, not from a formula of this module:
:func:`~pagedkv_edu.sim.block_size.sweep` (waste, table size and the hash chain's prefix hits),
:func:`~pagedkv_edu.sim.radix_compare.replay_radix` (chapter 8's radix tree, beside the hash chain)
and :func:`~pagedkv_edu.sim.preemption_cost.preemption_costs` (swap against recompute, the paper's
Fig. 19 model). The block size picks a point on curves that cover every size, so the curves are
computed once and a new block size only moves the marks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ..checks import check_whole, is_whole
from ..sim.block_size import BLOCK_SIZES, TABLE_ENTRY_BYTES, prefix_hit_tokens, sweep
from ..sim.decode_cost import A100_PCIE, H200, Device
from ..sim.preemption_cost import OPT_13B, PreemptionCost, preemption_costs
from ..sim.radix_compare import replay_radix
from ..workload import Request, copilot50, prompt_token_ids
from .language import Message, tr
from .render import PALETTE, svg_document

DEVICES: dict[str, Device] = {"a100-pcie": A100_PCIE, "h200": H200}
"""The cost model's devices, by the short key a control and ``data-state`` use: the paper's GPU and the book's."""
DEVICE_LABELS: dict[str, Message] = {"a100-pcie": tr("A100-40GB on PCIe 4.0")}
"""A device's name as the reader's language writes it, where it has words (in English, the device's own name)."""


def device_label(key: str) -> str:
    """What the device control and the pictures show for a key of DEVICES."""
    return DEVICE_LABELS.get(key, DEVICES[key].name)

VOCAB_SIZE = 49152   # the stand-in ids' vocabulary, the one prefix_hit_tokens draws from (SmolLM2's)


@dataclass(frozen=True)
class BlockSizeFrame:
    """Everything one picture shows: the four curves over ``block_sizes`` and the point chosen on them."""

    block_sizes: tuple[int, ...]
    block_size: int
    shared_prefix: int
    device: str                      # a key of DEVICES
    preempted_tokens: int
    unused_share: tuple[float, ...]  # share of held slots left empty over the run (1 - utilisation)
    table_entries: tuple[float, ...]  # block-table entries of a finished request, averaged
    hash_hits: tuple[float, ...]     # tokens a later request finds cached by the block hash chain, averaged
    radix_hit: float                 # the same with the radix tree, which has no block size
    swap_ms: tuple[float, ...]       # one preempted sequence out to the host and back
    recompute_ms: tuple[float, ...]  # the same sequence prefilled again

    @property
    def index(self) -> int:
        return self.block_sizes.index(self.block_size)

    @property
    def swap_wins(self) -> bool:
        return self.swap_ms[self.index] < self.recompute_ms[self.index]

    @property
    def data_state(self) -> str:
        """The inputs and the chosen point's results, for a test to compare a drawn picture with the model."""
        i = self.index
        return (f"block={self.block_size};prefix={self.shared_prefix};device={self.device};"
                f"unused={self.unused_share[i]:.4f};entries={self.table_entries[i]:.1f};"
                f"hash_hit={self.hash_hits[i]:.1f};radix_hit={self.radix_hit:.1f};"
                f"swap_ms={self.swap_ms[i]:.1f};recompute_ms={self.recompute_ms[i]:.1f}")

    def summary(self) -> Message:
        """One line of text for the same point (what a plain-text display shows)."""
        i = self.index
        return tr("B = {block_size}, shared prefix {shared_prefix} tokens, {device}: {unused:.1%} of held slots "
                  "empty, {entries:.1f} table entries a request, {hash_hits:.0f} tokens found by the hash chain "
                  "({radix_hit:.0f} by the radix tree), {cheaper} is cheaper ({swap:.0f} against {recompute:.0f} ms)",
                  block_size=self.block_size, shared_prefix=self.shared_prefix, device=device_label(self.device),
                  unused=self.unused_share[i], entries=self.table_entries[i], hash_hits=self.hash_hits[i],
                  radix_hit=self.radix_hit, cheaper=_cheaper(self), swap=self.swap_ms[i],
                  recompute=self.recompute_ms[i])


def _cheaper(frame: BlockSizeFrame) -> Message:
    return tr("swap") if frame.swap_wins else tr("recompute")


class BlockSizeState:
    """The state model: a workload, and the block size, shared prefix and device a reader picks.

    The memory curves depend on the requests' lengths alone, so they are swept once here; the
    prefix hits depend on the shared prefix, so they are replayed once per length and kept; the
    preemption costs are priced for every device here. Every setter checks its value before it
    changes anything, so a refused value leaves the state as it was.
    """

    def __init__(self, requests: Sequence[Request] | None = None, block_size: int = 16,
                 shared_prefix: int | None = None, device: str = "a100-pcie", *,
                 block_sizes: Sequence[int] = BLOCK_SIZES, preempted_tokens: int = 1024) -> None:
        """``requests`` default to the 50 consultants; ``shared_prefix`` to their shared system prompt.

        The prompts keep their drawn lengths whatever the shared prefix, so only the prefix hits
        move with it; ``preempted_tokens`` is the length of the one sequence the preemption model prices.
        """
        self.requests = list(copilot50(seed=0) if requests is None else requests)
        if len(self.requests) < 2:
            raise ValueError(f"prefix hits need at least 2 requests (one to cache, one to find), "
                             f"got {len(self.requests)}")
        sizes = tuple(check_whole("block size", b, 1) for b in block_sizes)   # en: not shown to readers (a caller's)
        if not sizes or list(sizes) != sorted(set(sizes)):
            raise ValueError(f"block_sizes must be increasing and non-empty, got {list(block_sizes)}")
        self.block_sizes = sizes
        self.preempted_tokens = check_whole("preempted_tokens", preempted_tokens, 1)
        self.shortest_prompt = min(r.prompt_len for r in self.requests)
        rows = sweep(self.requests, sizes)
        self._unused = tuple(1 - r.utilisation for r in rows)
        self._entries = tuple(r.table_entries_per_seq for r in rows)
        self._costs: dict[str, list[PreemptionCost]] = {
            key: preemption_costs(sizes, self.preempted_tokens, device=d, **OPT_13B) for key, d in DEVICES.items()}
        # The sweep measured the hash chain's hits at the requests' own shared prefix: kept, not measured twice.
        own = {r.shared_prefix_len for r in self.requests}
        self._hash_hits: dict[int, tuple[float, ...]] = {}
        if len(own) == 1:
            self._hash_hits[own.pop()] = tuple(r.prefix_hit_tokens for r in rows)
        self._radix_hits: dict[int, float] = {}
        self.block_size = self._checked_block_size(block_size)
        self.device = self._checked_device(device)
        self.set_shared_prefix(min(r.shared_prefix_len for r in self.requests) if shared_prefix is None
                               else shared_prefix)

    # --- the controls ----------------------------------------------------------------------------
    def set_block_size(self, block_size: int) -> None:
        self.block_size = self._checked_block_size(block_size)

    def set_shared_prefix(self, shared_prefix: int) -> None:
        """Let every prompt start with the same ``shared_prefix`` tokens (their lengths unchanged)."""
        self._hits_for(shared_prefix)      # checks the value and replays the prompts before anything changes
        self.shared_prefix = shared_prefix

    def set_device(self, device: str) -> None:
        self.device = self._checked_device(device)

    # --- reading ---------------------------------------------------------------------------------
    def frame(self) -> BlockSizeFrame:
        return self.frame_for(self.block_size, self.shared_prefix, self.device)

    def frame_for(self, block_size: int, shared_prefix: int, device: str) -> BlockSizeFrame:
        """The frame of another setting, checked the same way, without changing the reader's setting."""
        block_size, device = self._checked_block_size(block_size), self._checked_device(device)
        hash_hits, radix_hit = self._hits_for(shared_prefix)
        costs = self._costs[device]
        return BlockSizeFrame(self.block_sizes, block_size, shared_prefix, device, self.preempted_tokens,
                              self._unused, self._entries, hash_hits, radix_hit,
                              tuple(1e3 * c.swap_s for c in costs), tuple(1e3 * c.recompute_s for c in costs))

    # --- internals -------------------------------------------------------------------------------
    def _checked_block_size(self, block_size: int) -> int:
        if not is_whole(block_size) or block_size not in self.block_sizes:
            raise ValueError(f"block_size={block_size!r} is not one of the swept sizes {list(self.block_sizes)}")
        return block_size

    @staticmethod
    def _checked_device(device: str) -> str:
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
        return device

    def _hits_for(self, shared_prefix: int) -> tuple[tuple[float, ...], float]:
        """Mean tokens each request after the first finds cached: per block size, and with the radix tree.

        The hash chain's is the sweep's own measure (:func:`~pagedkv_edu.sim.block_size.prefix_hit_tokens`);
        the radix tree's is chapter 8's replay with room for every prompt, so that nothing is evicted
        and the two differ only in what each can share: whole blocks, or single tokens.
        """
        check_whole("shared_prefix", shared_prefix, 0)
        if shared_prefix > self.shortest_prompt:
            raise ValueError(tr("shared_prefix={shared_prefix} is longer than the shortest prompt ({shortest} tokens): "
                                "every prompt must hold the whole shared prefix", shared_prefix=shared_prefix,
                                shortest=self.shortest_prompt))
        if shared_prefix not in self._radix_hits:
            reqs = [dataclasses.replace(r, shared_prefix_len=shared_prefix) for r in self.requests]
            if shared_prefix not in self._hash_hits:
                self._hash_hits[shared_prefix] = tuple(prefix_hit_tokens(reqs, b) for b in self.block_sizes)
            prompts = [prompt_token_ids(r, VOCAB_SIZE) for r in reqs]
            radix = replay_radix(prompts, sum(map(len, prompts)), len(prompts))
            self._radix_hits[shared_prefix] = radix.hit_tokens / (len(prompts) - 1)   # the first fills the cache
        return self._hash_hits[shared_prefix], self._radix_hits[shared_prefix]


# --- drawing ---------------------------------------------------------------------------------------
WASTE_COLOUR, TABLE_COLOUR = PALETTE[1], PALETTE[8]      # Tol's rose and wine
HASH_COLOUR, RADIX_COLOUR = PALETTE[3], PALETTE[0]       # green and cyan
SWAP_COLOUR, RECOMPUTE_COLOUR = PALETTE[4], PALETTE[7]   # indigo and olive
MARK_COLOUR = "#BBBBBB"
WIDTH, PANEL_W, PANEL_H, HEADER = 780, 378, 200, 44
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 56, 12, 42, 34


@dataclass(frozen=True)
class Series:
    """One curve of a panel; the dash and the marker tell it apart without its colour."""

    label: str                    # a Message: drawn in the reader's language
    values: tuple[float, ...]
    colour: str
    dashed: bool = False
    square: bool = False


def _nice_step(span: float) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) that cuts ``span`` into at most five."""
    raw = span / 5
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _range(values: Sequence[float], log: bool) -> tuple[float, float]:
    """The y axis: whole decades on a log axis; from 0 to a round number above the largest value otherwise."""
    if log:
        return 10.0 ** math.floor(math.log10(min(values))), 10.0 ** math.ceil(math.log10(max(values)))
    top = max(values) * 1.08
    if top <= 0:
        return 0.0, 1.0
    step = _nice_step(top)
    return 0.0, step * math.ceil(top / step)


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** k for k in range(round(math.log10(lo)), round(math.log10(hi)) + 1)]
    step = _nice_step(hi - lo)
    return [lo + step * k for k in range(round((hi - lo) / step) + 1)]


def _panel(key: str, x0: float, y0: float, title: str, value: str, sizes: Sequence[int], chosen: int,
           series: Sequence[Series], log: bool, tick_label: Callable[[float], str],
           legend_low: bool = False) -> list[str]:
    """A small chart of ``series`` over the block sizes (evenly spaced: each size doubles the last).

    The legend goes top right, or bottom left with ``legend_low``: wherever the curves leave room.
    ``title``, ``value`` and the series' labels are messages, written in the reader's language.
    """
    left, right = x0 + PLOT_LEFT, x0 + PANEL_W - PLOT_RIGHT
    top, bottom = y0 + PLOT_TOP, y0 + PANEL_H - PLOT_BOTTOM
    lo, hi = _range([v for s in series for v in s.values], log)

    def px(i: int) -> float:
        return left + (right - left) * i / max(1, len(sizes) - 1)

    def py(v: float) -> float:
        if log:
            share = (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        else:
            share = (v - lo) / (hi - lo)
        return bottom - (bottom - top) * share

    out = [f'<g class="panel" data-panel="{key}" data-value="{escape(str(value))}">',
           f'<text x="{x0 + 8:g}" y="{y0 + 14:g}" font-size="12" font-weight="bold">{escape(str(title))}</text>',
           f'<text class="value" x="{x0 + 8:g}" y="{y0 + 29:g}" font-size="11" '  # en: not shown to readers
           f'fill="#333333">{escape(str(value))}</text>',
           f'<rect x="{left:g}" y="{top:g}" width="{right - left:g}" height="{bottom - top:g}" fill="none" '
           f'stroke="#888888" stroke-width="0.5"/>']
    for t in _ticks(lo, hi, log):
        y = py(t)
        out.append(f'<line x1="{left:g}" y1="{y:.1f}" x2="{right:g}" y2="{y:.1f}" stroke="#EEEEEE"/>')
        out.append(f'<text x="{left - 4:g}" y="{y + 3.5:.1f}" font-size="9" text-anchor="end">'
                   f'{escape(tick_label(t))}</text>')
    for i, b in enumerate(sizes):
        weight = "bold" if i == chosen else "normal"
        out.append(f'<text x="{px(i):.1f}" y="{bottom + 12:g}" font-size="9" text-anchor="middle" '
                   f'font-weight="{weight}">{b}</text>')
    out.append(f'<text x="{(left + right) / 2:g}" y="{bottom + 25:g}" font-size="9" text-anchor="middle" '  # en: not shown to readers
               f'fill="#555555">{escape(str(tr("block size B (tokens)")))}</text>')
    out.append(f'<line class="chosen" x1="{px(chosen):.1f}" y1="{top:g}" x2="{px(chosen):.1f}" y2="{bottom:g}" '  # en: not shown to readers
               f'stroke="{MARK_COLOUR}" stroke-width="6" stroke-opacity="0.6"/>')
    for k, s in enumerate(series):
        points = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(s.values))
        dash = ' stroke-dasharray="5,3"' if s.dashed else ""
        out.append(f'<polyline points="{points}" fill="none" stroke="{s.colour}" stroke-width="2"{dash}/>')  # en: not shown to readers
        for i, v in enumerate(s.values):
            r = 5 if i == chosen else 2.5
            mark = ' class="mark"' if i == chosen else ""
            stroke = ' stroke="#000000" stroke-width="1.5"' if i == chosen else ""
            if s.square:
                out.append(f'<rect{mark} x="{px(i) - r:.1f}" y="{py(v) - r:.1f}" width="{2 * r:g}" height="{2 * r:g}" '
                           f'fill="{s.colour}"{stroke}/>')
            else:
                out.append(f'<circle{mark} cx="{px(i):.1f}" cy="{py(v):.1f}" r="{r:g}" fill="{s.colour}"{stroke}/>')
        if len(series) > 1:   # a legend, each sample drawn as its curve is
            if legend_low:
                lx, ly = left + 8, bottom - 8 - 14 * (len(series) - 1 - k)
            else:
                lx, ly = right - 118, top + 12 + 14 * k
            out.append(f'<line x1="{lx:g}" y1="{ly - 3:g}" x2="{lx + 18:g}" y2="{ly - 3:g}" stroke="{s.colour}" '
                       f'stroke-width="2"{dash}/>')
            out.append(f'<text x="{lx + 22:g}" y="{ly:g}" font-size="10">{escape(str(s.label))}</text>')
    out.append("</g>")
    return out


def _count(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _body(frame: BlockSizeFrame) -> list[str]:
    """The heading and the four panels, two by two (the still places copies with a transform)."""
    i, b, sizes = frame.index, frame.block_size, frame.block_sizes
    heading = tr("Block size B = {block_size}: shared prefix {shared_prefix} tokens, {device}", block_size=b,
                 shared_prefix=frame.shared_prefix, device=device_label(frame.device))
    note = tr("The grey band marks B = {block_size}; each curve is the whole sweep. Waste, table and hits: counted; "
              "preemption: a model.", block_size=b)
    out = [f'<text x="8" y="17" font-size="14" font-weight="bold">{escape(str(heading))}</text>',
           f'<text x="8" y="34" font-size="11" fill="#555555">{escape(str(note))}</text>']
    right = PANEL_W + 4
    out += _panel("waste", 0, HEADER, tr("Last-block waste: share of held slots empty"),
                  tr("{share:.2%} of held slots empty at B = {block_size}", share=frame.unused_share[i], block_size=b),
                  sizes, i, [Series(tr("empty share"), frame.unused_share, WASTE_COLOUR)], False, lambda v: f"{v:.1%}")
    out += _panel("table", right, HEADER, tr("Block table: entries per request"),
                  tr("{entries:.1f} entries ({bytes:,.0f} bytes of int32 ids)", entries=frame.table_entries[i],
                     bytes=frame.table_entries[i] * TABLE_ENTRY_BYTES),
                  sizes, i, [Series(tr("entries"), frame.table_entries, TABLE_COLOUR)], True, _count)
    out += _panel("hits", 0, HEADER + PANEL_H,
                  tr("Prefix hits: of {shared_prefix} shared tokens, found", shared_prefix=frame.shared_prefix),
                  tr("hash chain {hash_hits:.0f} tokens, radix tree {radix_hit:.0f}", hash_hits=frame.hash_hits[i],
                     radix_hit=frame.radix_hit), sizes, i,
                  [Series(tr("hash chain"), frame.hash_hits, HASH_COLOUR),
                   Series(tr("radix tree"), (frame.radix_hit,) * len(sizes), RADIX_COLOUR, dashed=True, square=True)],
                  False, lambda v: f"{v:g}", legend_low=True)
    out += _panel("preemption", right, HEADER + PANEL_H,
                  tr("Preempting one {tokens:,}-token sequence (ms, model)", tokens=frame.preempted_tokens),
                  tr("swap {swap:.0f} ms, recompute {recompute:.0f} ms: {cheaper} is cheaper", swap=frame.swap_ms[i],
                     recompute=frame.recompute_ms[i], cheaper=_cheaper(frame)),
                  sizes, i, [Series(tr("swap out + in"), frame.swap_ms, SWAP_COLOUR),
                             Series(tr("recompute"), frame.recompute_ms, RECOMPUTE_COLOUR, dashed=True, square=True)],
                  True, _count)
    return out


PICTURE_H = HEADER + 2 * PANEL_H


def block_size_svg(frame: BlockSizeFrame) -> str:
    """The frame as SVG: waste, table size, prefix hits and preemption cost over every block size."""
    extra = (f' role="img" aria-label="{escape(str(frame.summary()))}" data-state="{escape(frame.data_state)}" '
             f'font-family="sans-serif"')
    return svg_document(WIDTH, PICTURE_H, _body(frame), "pagedkv-blocksize", extra)


def block_size_grid(state: BlockSizeState, settings: Sequence[tuple[int, int, str]], *, columns: int = 2,
                    scale: float = 0.6) -> str:
    """Several settings ``(block size, shared prefix, device)`` as one SVG, for a page where nothing runs.

    The reader's setting in ``state`` is left alone; ``data-state`` joins the frames' with ``|``.
    """
    if not 2 <= len(settings) <= 4:
        raise ValueError(f"a still shows 2 to 4 settings, got {len(settings)}")
    if columns < 1 or not 0 < scale <= 1:
        raise ValueError(f"need columns >= 1 and scale in (0, 1], got columns={columns}, scale={scale}")
    frames = [state.frame_for(*s) for s in settings]
    rows = -(-len(frames) // columns)
    cell_w, cell_h = WIDTH * scale, PICTURE_H * scale
    body = []
    for k, frame in enumerate(frames):
        r, c = divmod(k, columns)
        body += [f'<g class="setting" data-state="{escape(frame.data_state)}" '
                 f'transform="translate({c * cell_w:g} {r * cell_h:g}) scale({scale:g})">',
                 *_body(frame), '</g>']
    state_attr = escape("|".join(f.data_state for f in frames))
    return svg_document(min(columns, len(frames)) * cell_w, rows * cell_h, body, "pagedkv-blocksize-grid",
                        f' data-state="{state_attr}" font-family="sans-serif"')
