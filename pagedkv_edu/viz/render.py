"""Draw a :class:`~pagedkv_edu.viz.snapshot.Snapshot` as SVG: the one renderer of the memory's state.

:func:`render_svg` is chapter 2's and 7's picture (big cells, every block table), ``viz.replay``'s
frame chapter 6's (small cells, the queues and the token budget); both draw the blocks
with :func:`_grid`. Deterministic (no ids, no ``<defs>``), so tests compare ``data-*`` attributes
and the book embeds the SVG a reader saw. Colours: Paul Tol's "muted" palette, and every block
also names its owner, so colour is never the only cue.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Mapping
from html import escape

from ..core.block_manager import BlockManager
from ..core.block_pool import BlockPool
from ..core.block_table import BlockTable
from .language import tr
from .snapshot import BlockView, Snapshot, TableView, snapshot

# Paul Tol's muted qualitative scheme, ordered so that consecutive request ids contrast.
PALETTE: tuple[str, ...] = (
    "#88CCEE", "#CC6677", "#DDCC77", "#117733", "#332288",
    "#AA4499", "#44AA99", "#999933", "#882255",
)
FREE_COLOUR = "#DDDDDD"    # Tol's "no data" grey: a free block holds nothing
OTHER_COLOUR = "#A0A0A0"   # busy, but held by a request this picture does not show
ERROR_COLOUR = "#B2182B"

CELL_W, CELL_H, GAP = 64, 58, 6
PAD, LINE = 12, 16
ROW_H = 14
TABLE_W = 210


def request_label(request_id: Hashable) -> str:
    """``r3`` for integer ids, the id itself otherwise."""
    return f"r{request_id}" if isinstance(request_id, int) else str(request_id)


def request_colour(request_id: Hashable) -> str:
    """A colour that stays with a request for its whole life (and across processes).

    Integers cycle through the palette; other ids hash with CRC-32, not ``hash()``, whose
    value for strings changes from one Python process to the next.
    """
    if isinstance(request_id, int):
        return PALETTE[request_id % len(PALETTE)]
    return PALETTE[zlib.crc32(str(request_id).encode()) % len(PALETTE)]


def _text_colour(fill: str) -> str:
    """Black on light fills, white on dark ones (relative luminance of the sRGB colour)."""
    r, g, b = (int(fill[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "#000000" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "#FFFFFF"


def _text(x: float, y: float, content: str, *, size: int = 11, anchor: str = "start",
          colour: str = "#000000", weight: str = "normal", cls: str | None = None, mono: bool = False) -> str:
    """One ``<text>``; ``content`` may be a message (:func:`~pagedkv_edu.viz.language.tr`): it is drawn in the
    reader's language, rendered here (``escape`` alone would read its English value)."""
    family = "monospace" if mono else "sans-serif"
    class_attr = f' class="{cls}"' if cls else ""
    return (f'<text{class_attr} x="{x:g}" y="{y:g}" font-family="{family}" font-size="{size}" '
            f'text-anchor="{anchor}" fill="{colour}" font-weight="{weight}">{escape(str(content))}</text>')


def _cell(view: BlockView, x: float, y: float, w: float, h: float, block_size: int, detailed: bool) -> list[str]:
    """One block: its owners' colours (stripes when shared), a pale empty tail, a dot when cached; with
    ``detailed``, its id, owner, ``×n`` reference badge and a fill bar."""
    owner_attr = " ".join(request_label(o) for o in view.owners)
    out = [f'<g class="block" data-block="{view.block_id}" data-state="{view.state}" '
           f'data-owner="{escape(owner_attr)}" data-fill="{view.fill}" data-refs="{view.ref_count}">']
    if view.owners:
        colours = [request_colour(o) for o in view.owners]
    else:
        colours = [OTHER_COLOUR if view.state == "other" else "#FFFFFF" if view.cached else FREE_COLOUR]
    band = w / len(colours)
    for i, colour in enumerate(colours):   # one band per owner: stripes for a shared block
        out.append(f'<rect class="fill" x="{x + i * band:g}" y="{y:g}" width="{band:g}" height="{h:g}" '  # en: not shown to readers
                   f'fill="{colour}"/>')
    if view.owners and view.fill < block_size:   # the empty tail: internal waste (a reservation's, mostly)
        empty = w * (1 - view.fill / block_size)
        out.append(f'<rect x="{x + w - empty:g}" y="{y:g}" width="{empty:g}" height="{h:g}" '
                   f'fill="#FFFFFF" fill-opacity="0.7"/>')
    if detailed or view.ref_count > 1:   # small cells: a thick border marks a shared block
        out.append(f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" fill="none" '
                   f'stroke="{"#444444" if detailed else "#000000"}" stroke-width="{1 if detailed else 2}"/>')
    if view.cached:
        out.append(f'<circle class="cached" cx="{x + w / 2:g}" cy="{y + h / 2:g}" r="{min(w, h, 24) / 6:g}" '  # en: not shown to readers
                   f'fill="#000000"/>')
    if detailed:
        out += _cell_text(view, x, y, w, h, block_size, colours)
    out.append("</g>")
    return out


def _cell_text(view: BlockView, x: float, y: float, w: float, h: float, block_size: int,
               colours: list[str]) -> list[str]:
    names = "+".join(request_label(o) for o in view.owners)
    if view.state == "free":
        label = tr("free")
    elif view.state == "other":
        label = tr("held")
    else:
        label = names if len(names) <= 9 else tr("{n} reqs", n=len(view.owners))
    ink, out = _text_colour(colours[0]), []
    if len(colours) > 1:   # labels on stripes sit on a white pill to stay legible
        ink = "#000000"
        out.append(f'<rect x="{x + 3:g}" y="{y + 2:g}" width="{w - 24:g}" height="14" rx="3" fill="#FFFFFF"/>')
        out.append(f'<rect x="{x + 3:g}" y="{y + 19:g}" width="{w - 6:g}" height="28" rx="3" fill="#FFFFFF"/>')
    out.append(_text(x + 4, y + 13, f"#{view.block_id}", size=11, colour=ink, weight="bold"))
    out.append(_text(x + w / 2, y + 30, label, size=11, anchor="middle", colour=ink))
    if view.ref_count > 1:
        cx, cy = x + w - 11, y + 10
        out.append(f'<circle class="badge" cx="{cx:g}" cy="{cy:g}" r="8" fill="#FFFFFF" stroke="#000000"/>')  # en: not shown to readers
        out.append(_text(cx, cy + 3.5, f"×{view.ref_count}", size=9, anchor="middle", weight="bold"))
    if view.owners:
        bar_x, bar_y, bar_w = x + 4, y + h - 11, w - 8
        out.append(f'<rect class="fillbar" x="{bar_x:g}" y="{bar_y:g}" width="{bar_w:g}" height="7" '  # en: not shown to readers
                   f'fill="#FFFFFF" stroke="#000000" stroke-width="0.5"/>')
        out.append(f'<rect x="{bar_x:g}" y="{bar_y:g}" width="{bar_w * view.fill / block_size:.2f}" height="7" '
                   f'fill="#000000"/>')
        out.append(_text(x + w / 2, y + h - 15, f"{view.fill}/{block_size}", size=9, anchor="middle", colour=ink))
    return out


def _grid(snap: Snapshot, x0: float, top: float, cols: int, w: float, h: float, gap: float,
          detailed: bool) -> tuple[list[str], float]:
    """Every physical block in id order, ``cols`` a row; the per-block state also rides on the grid's
    ``data-*`` attributes, for tests and the browser. Returns the elements and the bottom edge."""
    views = snap.blocks
    out = [f'<g class="grid" data-refs="{" ".join(map(str, snap.ref_counts))}" '
           f'data-owners="{escape(" ".join("+".join(map(request_label, v.owners)) or "-" for v in views))}" '
           f'data-cached="{" ".join(map(str, sorted(snap.cached)))}" data-block-size="{snap.block_size}" '
           f'data-fills="{" ".join(str(v.fill) for v in views)}">']
    for view in views:
        r, c = divmod(view.block_id, cols)
        out += _cell(view, x0 + c * (w + gap), top + r * (h + gap), w, h, snap.block_size, detailed)
    out.append("</g>")
    return out, top + -(-len(views) // cols) * (h + gap) - gap


def _table_rows(table: TableView, max_rows: int) -> list[tuple[int, int, int] | None]:
    """The rows to print; ``None`` marks the elided middle of a long table."""
    rows = list(table.rows)
    if len(rows) <= max_rows:
        return rows
    return rows[: max_rows - 2] + [None] + rows[-1:]


def _table(table: TableView, x: float, y: float, block_size: int, max_rows: int) -> tuple[list[str], float]:
    rows = _table_rows(table, max_rows)
    waste = len(table.rows) * block_size - table.num_tokens
    out = [f'<g class="table" data-request="{escape(request_label(table.seq_id))}" '
           f'data-blocks="{" ".join(map(str, table.block_ids))}">']
    out.append(f'<rect x="{x:g}" y="{y + 3:g}" width="10" height="10" fill="{request_colour(table.seq_id)}" '
               f'stroke="#444444"/>')
    out.append(_text(x + 14, y + 12, tr("{request}: {tokens} tokens, waste {waste}",
                                        request=request_label(table.seq_id), tokens=table.num_tokens, waste=waste),
                     weight="bold"))
    y += LINE
    # Right-aligned columns as separate <text>s: SVG collapses runs of spaces.
    for cx, word in ((44, tr("logical")), (104, tr("physical")), (150, tr("filled"))):
        out.append(_text(x + cx, y + 11, word, size=10, anchor="end", colour="#555555"))
    y += ROW_H
    for row in rows:
        if row is None:
            hidden = len(table.rows) - (max_rows - 1)
            out.append(_text(x + 44, y + 11, tr("⋯ {hidden} more rows", hidden=hidden), size=10, colour="#555555",
                             mono=True))
        else:
            logical, physical, fill = row
            out.append(f'<g class="table-row" data-row="{logical} {physical} {fill}">')
            out.append(_text(x + 44, y + 11, str(logical), size=10, anchor="end", mono=True))
            out.append(_text(x + 60, y + 11, "→", size=10, anchor="middle", mono=True))
            out.append(_text(x + 104, y + 11, str(physical), size=10, anchor="end", mono=True))
            out.append(_text(x + 150, y + 11, f"{fill}/{block_size}", size=10, anchor="end", mono=True))
            out.append("</g>")
        y += ROW_H
    out.append("</g>")
    return out, y + 6


def _counters(snap: Snapshot) -> list[str]:
    free = ", ".join(map(str, snap.free_order[:10])) + (", …" if snap.num_free > 10 else "")
    counts = dict(used=snap.num_used, total=snap.num_blocks, free=snap.num_free, tokens=snap.num_tokens,
                  waste=snap.waste_slots, percent=100 * snap.waste_fraction)
    if snap.num_other:
        head = tr("used {used}/{total} blocks · free {free} · tokens {tokens} · waste {waste} slots ({percent:.1f}%)"
                  " · held elsewhere {other}", other=snap.num_other, **counts)
    else:
        head = tr("used {used}/{total} blocks · free {free} · tokens {tokens} · waste {waste} slots ({percent:.1f}%)",
                  **counts)
    lines = [
        (head, "#000000", "counters"),
        (tr("block size {size} · next free: [{free}]", size=snap.block_size, free=free), "#333333", "free-queue"),
    ]
    if snap.message:
        lines.append((snap.message, ERROR_COLOUR if snap.is_error else "#333333", "message"))
    return [_text(PAD, PAD + 12 + i * LINE, text, colour=colour, cls=cls, weight="bold" if i == 0 else "normal")
            for i, (text, colour, cls) in enumerate(lines)]


def render_svg(snap: Snapshot, *, columns: int = 8, max_rows: int = 10) -> str:
    """The SVG picture of ``snap``: block grid, block tables and counters."""
    if columns <= 0 or max_rows < 3:
        raise ValueError(f"need columns > 0 and max_rows >= 3, got columns={columns}, max_rows={max_rows}")
    header = _counters(snap)
    top = PAD + len(header) * LINE + 8
    cols = min(columns, snap.num_blocks)
    grid_w = cols * (CELL_W + GAP) - GAP
    body, grid_bottom = _grid(snap, PAD, top, cols, CELL_W, CELL_H, GAP, detailed=True)
    grid_h = grid_bottom - top
    # Block tables in columns beside the grid, a new column when one would grow past the grid.
    column_h = max(grid_h, 4 * LINE + max_rows * ROW_H)
    tx, ty, bottom = PAD + grid_w + 2 * PAD, top, top + grid_h
    if not snap.tables:
        body.append(_text(tx, ty + 12, tr("no live requests"), colour="#555555"))
    for table in snap.tables:
        height = LINE + ROW_H * (1 + len(_table_rows(table, max_rows))) + 6
        if ty > top and ty + height > top + column_h:
            tx, ty = tx + TABLE_W + PAD, top
        parts, ty = _table(table, tx, ty, snap.block_size, max_rows)
        body += parts
        bottom = max(bottom, ty)
    width = max(tx + TABLE_W + PAD, PAD + 520)
    return svg_document(width, bottom + PAD, header + body, "pagedkv-blocks")


def svg_document(width: float, height: float, body: list[str], cls: str, extra: str = "") -> str:
    """``body`` in an ``<svg>`` of class ``cls`` on a white ground, scaled down to fit its container."""
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '  # en: not shown to readers
        f'viewBox="0 0 {width:g} {height:g}" style="max-width:100%;height:auto" class="{cls}"{extra}>',
        f'<rect width="{width:g}" height="{height:g}" fill="#FFFFFF"/>', *body, "</svg>"])  # en: not shown to readers


def manager_svg(manager: BlockManager) -> str:
    """The picture of a :class:`BlockManager` (what ``BlockManager._repr_svg_`` shows)."""
    return render_svg(snapshot(manager))


def pool_svg(pool: BlockPool, tables: Mapping[Hashable, BlockTable] | None = None) -> str:
    """The picture of a pool, with the tables of the sequences that point into it."""
    return render_svg(snapshot(pool, tables))


class Picture:
    """A static picture that Jupyter, GitHub and the book display as SVG.

    ``Picture(manager)`` or ``Picture(pool, {"seq": table})``: the state is taken when the
    picture is made, so a later change to the manager does not alter a cell's output.
    """

    def __init__(self, source: BlockManager | BlockPool | Snapshot,
                 tables: Mapping[Hashable, BlockTable] | None = None) -> None:
        self.snapshot = source if isinstance(source, Snapshot) else snapshot(source, tables)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        return {"image/svg+xml": render_svg(self.snapshot), "text/plain": str(self.snapshot.summary())}

    def __repr__(self) -> str:
        return str(self.snapshot.summary())
