"""Reference solution for chapter 0: KV bytes per token, from a model's config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def kv_bytes_per_token(config: Mapping[str, Any], bytes_per_element: int) -> int:
    """Every layer keeps one K and one V vector per **KV** head for each token.

    Under grouped-query attention (GQA) several query heads share one K/V head, so the count is
    ``num_key_value_heads``, not ``num_attention_heads``; a config without it is plain multi-head
    attention. ``head_dim`` is the config's own when it gives one, else ``hidden_size`` over the
    query heads.
    """
    query_heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or query_heads
    head_dim = config.get("head_dim") or config["hidden_size"] // query_heads
    return config["num_hidden_layers"] * kv_heads * head_dim * 2 * bytes_per_element
