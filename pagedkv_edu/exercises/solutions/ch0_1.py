"""Reference solutions for chapters 0 and 1."""

from __future__ import annotations

from collections.abc import Sequence


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """Every layer keeps one K and one V vector per KV head for each token."""
    return num_layers * num_kv_heads * head_dim * 2 * bytes_per_element


def first_fit(holes: Sequence[tuple[int, int]], size: int) -> int | None:
    """Start of the first (lowest-address) hole of at least ``size`` slots, or None."""
    for start, hole in sorted(holes):
        if hole >= size:
            return start
    return None
