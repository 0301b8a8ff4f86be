"""Draw a radix cache as SVG (chapter 8): a pure function of a :class:`RadixView`, taken from the tree.

Locked nodes are filled, evictable ones grey; the output is deterministic (no ids, no ``<defs>``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ..sim.radix_cache import RadixCache, RadixNode
from .language import tr
from .render import FREE_COLOUR, PALETTE, _text, svg_document

BOX_W, BOX_H, COL_W, ROW_H, PAD, TITLE_H = 150, 30, 176, 40, 10, 22
LOCKED_COLOUR = PALETTE[0]


@dataclass(frozen=True)
class NodeView:
    depth: int
    row: float            # vertical position in leaf rows (a parent sits at its children's mean)
    label: str
    num_tokens: int
    locked: bool
    parent: int | None    # index of the parent's NodeView; None under the root


@dataclass(frozen=True)
class RadixView:
    title: str
    nodes: tuple[NodeView, ...]
    num_tokens: int
    capacity_tokens: int

    @property
    def rows(self) -> int:
        return max(1, sum(1 for i, _ in enumerate(self.nodes) if all(n.parent != i for n in self.nodes)))

    @property
    def depth(self) -> int:
        return max((n.depth for n in self.nodes), default=0) + 1


def radix_view(cache: RadixCache, title: str = "", decode: Callable[[Sequence[int]], str] | None = None,
               max_chars: int = 18) -> RadixView:
    """The tree's shape now (a copy: later changes to ``cache`` do not alter it).

    ``decode`` turns a node's tokens into text (a tokenizer's ``decode``); without it, the ids.
    """
    out: list[NodeView] = []

    def label(node: RadixNode) -> str:
        text = decode(list(node.key)) if decode else " ".join(map(str, node.key))
        text = " ".join(text.split())
        return text if len(text) <= max_chars else text[:max_chars - 1] + "…"

    next_row = [0.0]

    def visit(node: RadixNode, depth: int, parent: int | None) -> float:
        index = len(out)
        out.append(NodeView(depth, 0.0, label(node), len(node.key), node.lock_ref > 0, parent))
        children = [node.children[k] for k in sorted(node.children)]
        if children:
            row = sum(visit(c, depth + 1, index) for c in children) / len(children)
        else:
            row, next_row[0] = next_row[0], next_row[0] + 1
        out[index] = NodeView(depth, row, out[index].label, out[index].num_tokens, out[index].locked, parent)
        return row

    for key in sorted(cache.root.children):
        visit(cache.root.children[key], 0, None)
    return RadixView(title, tuple(out), cache.num_tokens, cache.capacity_tokens)


def _tree(view: RadixView, x0: float, y0: float) -> list[str]:
    parts = [_text(x0, y0 + 14, view.title, weight="bold"),
             _text(x0, y0 + 28, tr("{tokens} of {capacity} tokens, {nodes} nodes", tokens=view.num_tokens,
                                   capacity=view.capacity_tokens, nodes=len(view.nodes)), size=10, colour="#444444")]
    top = y0 + TITLE_H + 16

    def at(n: NodeView) -> tuple[float, float]:
        return x0 + 14 + n.depth * COL_W, top + n.row * ROW_H

    parts.append(f'<circle cx="{x0 + 5:g}" cy="{top + BOX_H / 2:g}" r="4" fill="#000000"/>')  # en: not shown to readers
    for n in view.nodes:
        x, y = at(n)
        if n.parent is None:
            px, py = x0 + 5, top + BOX_H / 2
        else:
            p = view.nodes[n.parent]
            px, py = at(p)[0] + BOX_W, at(p)[1] + BOX_H / 2
        parts.append(f'<path d="M{px:g},{py:g} L{x:g},{y + BOX_H / 2:g}" stroke="#666666" fill="none"/>')
    for n in view.nodes:
        x, y = at(n)
        fill = LOCKED_COLOUR if n.locked else FREE_COLOUR
        tooltip = tr("{label} ({n} tokens)", label=n.label, n=n.num_tokens)
        parts.append(f'<rect x="{x:g}" y="{y:g}" width="{BOX_W}" height="{BOX_H}" rx="4" fill="{fill}" '
                     f'stroke="#333333"><title>{escape(str(tooltip))}</title></rect>')
        parts.append(_text(x + 5, y + 13, n.label, size=10, mono=True))
        tokens = tr("{n} tok · in use", n=n.num_tokens) if n.locked else tr("{n} tok", n=n.num_tokens)
        parts.append(_text(x + 5, y + 25, tokens, size=9, colour="#333333"))
    return parts


def render_radix_svg(views: Sequence[RadixView]) -> str:
    """Several trees side by side, left to right (the same tree at successive moments)."""
    if not views:
        raise ValueError("no tree to draw")
    widths = [30 + v.depth * COL_W for v in views]
    height = PAD * 2 + TITLE_H + 16 + max(v.rows for v in views) * ROW_H + 24
    parts, x = [], PAD
    for view, width in zip(views, widths):
        parts += _tree(view, x, PAD)
        x += width + PAD
    legend_y = height - 10
    parts += [f'<rect x="{PAD}" y="{legend_y - 10:g}" width="12" height="12" fill="{LOCKED_COLOUR}" stroke="#333333"/>',
              _text(PAD + 16, legend_y, tr("held by a running request (locked)"), size=10),
              f'<rect x="{PAD + 230}" y="{legend_y - 10:g}" width="12" height="12" fill="{FREE_COLOUR}" stroke="#333333"/>',
              _text(PAD + 246, legend_y, tr("unreferenced: evictable, least recently used leaf first"), size=10)]
    label = escape(str(tr("radix tree")))
    return svg_document(x + PAD, height, parts, "pagedkv-radix", f' role="img" aria-label="{label}"')


class RadixPicture:
    """A static picture of one or more :class:`RadixView` for Jupyter, GitHub and the book."""

    def __init__(self, views: Sequence[RadixView]) -> None:
        self.views = tuple(views)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        return {"image/svg+xml": render_radix_svg(self.views), "text/plain": repr(self)}

    def __repr__(self) -> str:
        return str(tr("; ")).join(str(tr("{title}: {nodes} nodes, {tokens} tokens", title=v.title,
                                         nodes=len(v.nodes), tokens=v.num_tokens)) for v in self.views)
