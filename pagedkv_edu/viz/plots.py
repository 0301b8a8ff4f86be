"""Matplotlib figures of the chapters: pure functions from results to axes.

Colours are fixed here so that "used", "over-reserved", "internal" and "external" mean the same
colour in every chapter.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Patch, Rectangle

from ..sim.simulate import ArenaSlice, SimResult
from ..specs import ModelSpec

WASTE_COLOURS: dict[str, str] = {
    "used": "#1b7837",
    "over_reserved": "#a6dba0",
    "internal": "#f4a582",
    "external": "#b2182b",
    "free": "#f0f0f0",
}
WASTE_LABELS: dict[str, str] = {
    "used": "holds tokens",
    "over_reserved": "over-reservation (used later)",
    "internal": "internal fragmentation (never used)",
    "external": "external fragmentation (holes too small)",
    "free": "free",
}


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    _, new_ax = plt.subplots(figsize=figsize)
    return new_ax


def kv_memory_vs_concurrency(
    spec: ModelSpec,
    seq_lens: Sequence[int] = (512, 2048, 8192),
    max_requests: int = 64,
    ax: Axes | None = None,
) -> Axes:
    """KV-cache GB against concurrent requests, one line per sequence length, weights dashed.

    Decimal gigabytes (10**9 bytes), the unit the articles give weights and totals in (chapter 0's "14 GB").
    """
    ax = _axes(ax, (7, 4))
    requests = list(range(1, max_requests + 1))
    for seq_len in seq_lens:
        ax.plot(requests, [spec.kv_bytes(seq_len, r) / 1e9 for r in requests], label=f"{seq_len:,} tokens each")
    ax.axhline(spec.weight_bytes / 1e9, color="black", linestyle="--", label=f"weights ({spec.weight_bytes / 1e9:.1f} GB)")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("KV cache (GB)")
    ax.set_title(f"{spec.name} ({spec.dtype}): {spec.kv_bytes_per_token // 1024} KiB of KV per token")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    return ax


def waste_timeline(result: SimResult, ax: Axes | None = None) -> Axes:
    """Stacked shares of the KV budget over the run: tokens, each waste kind, free."""
    ax = _axes(ax, (9, 3.8))
    kinds = ["used", "over_reserved", "internal", "external", "free"]
    steps = [s.step for s in result.steps]
    series = [[getattr(s, k) / result.capacity for s in result.steps] for k in kinds]
    ax.stackplot(steps, series, colors=[WASTE_COLOURS[k] for k in kinds], labels=[WASTE_LABELS[k] for k in kinds])
    ax.set_xlim(0, max(steps))
    ax.set_ylim(0, 1)
    ax.set_xlabel("decode step")
    ax.set_ylabel("share of the KV budget")
    rule = f"block size {result.block_size}" if result.policy == "paged" else f"reserve = {result.reserve}"
    ax.set_title(f"{result.policy} ({rule}): {result.utilisation:.0%} of held slots hold tokens")
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    return ax


def arena_strip(slices: Sequence[ArenaSlice], capacity: int, next_request: int | None = None,
                ax: Axes | None = None, title: str | None = None) -> Axes:
    """The arena as one strip: each reservation split into used / later / never, holes outlined.

    Holes smaller than ``next_request`` slots (the waiting request's reservation) are shaded
    as external fragmentation.
    """
    ax = _axes(ax, (10, 2.0))
    cursor = 0
    for sl in sorted(slices, key=lambda s: s.start):
        if sl.start > cursor:
            _hole(ax, cursor, sl.start - cursor, next_request)
        parts = [("used", sl.used), ("over_reserved", sl.final_len - sl.used), ("internal", sl.size - sl.final_len)]
        x = sl.start
        for kind, width in parts:
            if width > 0:
                ax.add_patch(Rectangle((x, 0), width, 1, color=WASTE_COLOURS[kind], linewidth=0))
                x += width
        ax.add_patch(Rectangle((sl.start, 0), sl.size, 1, fill=False, edgecolor="black", linewidth=0.8))
        cursor = sl.start + sl.size
    if cursor < capacity:
        _hole(ax, cursor, capacity - cursor, next_request)
    ax.set_xlim(0, capacity)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_xlabel("arena slot")
    kinds = ["used", "over_reserved", "internal", "external"]
    handles = [Patch(color=WASTE_COLOURS[k], label=WASTE_LABELS[k]) for k in kinds]
    handles.append(Patch(facecolor="white", edgecolor="black", label="free hole"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def _hole(ax: Axes, start: int, size: int, next_request: int | None) -> None:
    stranded = next_request is not None and size < next_request
    ax.add_patch(Rectangle((start, 0), size, 1, facecolor=WASTE_COLOURS["external"] if stranded else "white",
                           edgecolor="black", linewidth=0.8, hatch="//" if stranded else None))
