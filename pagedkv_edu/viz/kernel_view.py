"""Which cache rows a kernel's programs and tiles touch, drawn as SVG (chapter 4's pictures).

Top: each sequence's positions cut into the tiles a program loops over (masked positions
hatched); bottom: the physical cache, each slot painted with the program and tile that reads
(or writes) it. Pure functions: the same arguments give the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from .language import tr
from .render import PALETTE, _text, _text_colour, svg_document

CELL = 22  # one slot or one token position
PAD = 12
LABEL_W = 92  # room for the row labels on the left
MIN_WIDTH = 460  # room for the title lines
MASKED = "#EEEEEE"
UNREAD = "#FFFFFF"


@dataclass(frozen=True)
class KernelView:
    """A picture Jupyter, GitHub and the book display as SVG, with a one-line text fallback."""

    svg: str
    summary: str     # a message (tr): English value, shown in the reader's language

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        return {"image/svg+xml": self.svg, "text/plain": str(self.summary)}

    def __repr__(self) -> str:
        return str(self.summary)


def _cell(x: float, y: float, fill: str, label: str, *, hatched: bool = False, cls: str = "cell",
          data: str = "") -> list[str]:
    out = [f'<g class="{cls}"{data}>',
           f'<rect x="{x:g}" y="{y:g}" width="{CELL}" height="{CELL}" fill="{fill}" stroke="#666666" '
           f'stroke-width="0.5"/>']
    if hatched:  # two diagonals: readable without colour
        out.append(f'<path d="M{x:g} {y + CELL:g}L{x + CELL:g} {y:g}M{x:g} {y:g}L{x + CELL:g} {y + CELL:g}" '
                   f'stroke="#BBBBBB" stroke-width="0.7"/>')
    if label:
        out.append(_text(x + CELL / 2, y + 15, label, size=9, anchor="middle", colour=_text_colour(fill)))
    out.append("</g>")
    return out


def _svg(width: float, height: float, body: list[str], title: str) -> str:
    return svg_document(width, height, body, "pagedkv-kernel", f' role="img" aria-label="{escape(str(title))}"')


def split_ranges(seq_len: int, num_splits: int, tile_n: int) -> list[tuple[int, int]]:
    """Each split's [start, end) positions, as the kernels cut them: whole tiles per split."""
    chunk = -(-(-(-seq_len // num_splits)) // tile_n) * tile_n
    return [(min(s * chunk, seq_len), min((s + 1) * chunk, seq_len)) for s in range(num_splits)]


def _check(block_size: int, num_blocks: int, tile_n: int) -> None:
    for name, value in (("block_size", block_size), ("num_blocks", num_blocks), ("tile_n", tile_n)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _cache_grid(x0: float, y0: float, num_blocks: int, block_size: int,
                painted: dict[int, tuple[str, str]]) -> tuple[list[str], float]:
    """The physical cache: block rows of slots; ``painted[slot] = (colour, label)``."""
    out = [_text(x0, y0 + 11, tr("physical cache (one row per block, one cell per slot)"), size=11, weight="bold")]
    y = y0 + 18
    for block in range(num_blocks):
        out.append(_text(x0 + LABEL_W - 6, y + 15, tr("block {block}", block=block), size=10, anchor="end"))
        for offset in range(block_size):
            slot = block * block_size + offset
            fill, label = painted.get(slot, (UNREAD, ""))
            out += _cell(x0 + LABEL_W + offset * CELL, y, fill, label, cls="slot",
                         data=f' data-slot="{slot}"')
        y += CELL + 2
    return out, y


def tile_reads_svg(block_tables: Sequence[Sequence[int]], seq_lens: Sequence[int], block_size: int,
                   num_blocks: int, tile_n: int, num_splits: int = 1) -> KernelView:
    """Which slots each (sequence, split) program reads, tile by tile, through the block tables.

    A program's colour marks its positions on top and the slots they resolve to below; the
    number in a cell is the tile (``t0``, ``t1``, ...) that reads it. Positions of a split's
    last tile that lie past its end are hatched: masked, so neither their table entry nor
    their row is loaded.
    """
    _check(block_size, num_blocks, tile_n)
    if len(block_tables) != len(seq_lens):
        raise ValueError(f"{len(block_tables)} block tables for {len(seq_lens)} sequence lengths")
    body: list[str] = []
    painted: dict[int, tuple[str, str]] = {}
    x0, y = PAD, PAD
    if num_splits > 1:
        title = tr("token positions, tiles of {tile_n} (block size {block_size}, {num_splits} splits per sequence)",
                   tile_n=tile_n, block_size=block_size, num_splits=num_splits)
    else:
        title = tr("token positions, tiles of {tile_n} (block size {block_size}, {num_splits} split per sequence)",
                   tile_n=tile_n, block_size=block_size, num_splits=num_splits)
    body.append(_text(x0, y + 11, title, size=11, weight="bold"))
    body.append(_text(x0, y + 26, tr("colour: one program (sequence, split); tN: its tile N; hatched: masked, "
                                     "reads nothing"), size=10, colour="#555555"))
    y += 36
    widest = block_size
    for seq, (table, seq_len) in enumerate(zip(block_tables, seq_lens)):
        if seq_len > len(table) * block_size:
            raise ValueError(f"sequence {seq} has {seq_len} tokens but its table {list(table)} holds "
                             f"{len(table) * block_size} at block size {block_size}")
        body.append(_text(x0, y + 15, tr("sequence {seq}", seq=seq), size=10))
        x = x0 + LABEL_W
        cells = 0
        for split, (start, end) in enumerate(split_ranges(seq_len, num_splits, tile_n)):
            colour = PALETTE[(seq * num_splits + split) % len(PALETTE)]
            for tile, tile_start in enumerate(range(start, end, tile_n)):
                for pos in range(tile_start, tile_start + tile_n):
                    if pos < end:
                        slot = table[pos // block_size] * block_size + pos % block_size
                        painted[slot] = (colour, f"t{tile}")
                        body += _cell(x, y, colour, f"t{tile}", cls="position",
                                      data=f' data-pos="{pos}" data-slot="{slot}" data-split="{split}"')
                    else:
                        body += _cell(x, y, MASKED, "", hatched=True, cls="position masked")  # en: not shown to readers
                    x += CELL
                    cells += 1
                x += 3  # a gap between tiles
        widest = max(widest, cells + cells // max(tile_n, 1))
        y += CELL + 6
    grid, y = _cache_grid(x0, y + 6, num_blocks, block_size, painted)
    body += grid
    width = max(MIN_WIDTH, x0 + LABEL_W + widest * CELL + PAD + 40)
    summary = tr("tile reads: {sequences} sequences, block size {block_size}, tiles of {tile_n}, {num_splits} splits, "
                 "{slots} slots read", sequences=len(seq_lens), block_size=block_size, tile_n=tile_n,
                 num_splits=num_splits, slots=len(painted))
    return KernelView(_svg(width, y + PAD, body, summary), summary)


def store_svg(slot_mapping: Sequence[int], block_size: int, num_blocks: int) -> KernelView:
    """The slot-mapped store: program ``i`` copies token ``i``'s K/V row to slot ``slot_mapping[i]``.

    Top: the new tokens, one program each, with the slot each goes to (``skip`` for -1).
    Bottom: the cache, the written slots labelled with their token.
    """
    _check(block_size, num_blocks, 1)
    body: list[str] = []
    painted: dict[int, tuple[str, str]] = {}
    x0, y = PAD, PAD
    body.append(_text(x0, y + 11, tr("new tokens, one program each (the slot each is stored to)"), size=11,
                      weight="bold"))
    y += 20
    body.append(_text(x0, y + 15, tr("token"), size=10))
    body.append(_text(x0, y + CELL + 15, tr("slot"), size=10))
    for token, slot in enumerate(slot_mapping):
        x = x0 + LABEL_W + token * CELL
        if slot < 0:
            body += _cell(x, y, MASKED, f"p{token}", hatched=True, cls="token skipped")  # en: not shown to readers
            body.append(_text(x + CELL / 2, y + CELL + 15, tr("skip"), size=8, anchor="middle"))
            continue
        if slot >= num_blocks * block_size:
            raise ValueError(f"token {token}'s slot {slot} is past the cache's {num_blocks * block_size} slots")
        colour = PALETTE[token % len(PALETTE)]
        painted[slot] = (colour, f"p{token}")
        body += _cell(x, y, colour, f"p{token}", cls="token", data=f' data-slot="{slot}"')
        body.append(_text(x + CELL / 2, y + CELL + 15, str(slot), size=9, anchor="middle"))
    grid, y_end = _cache_grid(x0, y + 2 * CELL + 8, num_blocks, block_size, painted)
    body += grid
    width = max(MIN_WIDTH, x0 + LABEL_W + max(block_size, len(slot_mapping)) * CELL + PAD)
    summary = tr("store: {tokens} tokens, {written} written, block size {block_size}", tokens=len(slot_mapping),
                 written=len(painted), block_size=block_size)
    return KernelView(_svg(width, y_end + PAD, body, summary), summary)
