"""Reference solution for chapter 0: KV bytes per token."""

from __future__ import annotations


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """Every layer keeps one K and one V vector per KV head for each token."""
    return num_layers * num_kv_heads * head_dim * 2 * bytes_per_element
