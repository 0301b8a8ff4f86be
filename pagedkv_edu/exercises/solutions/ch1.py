"""Reference solution for chapter 1: first-fit placement."""

from __future__ import annotations

from collections.abc import Sequence


def first_fit(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    """Start of the first (lowest-address) hole of at least ``size`` slots, or None."""
    for start, hole in sorted(holes):
        if hole >= size:
            return start
    return None
