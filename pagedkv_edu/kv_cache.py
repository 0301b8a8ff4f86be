"""The paged KV cache in memory: per-layer K and V tensors cut into blocks (chapter 3).

Chapter 2's block pool hands out block *ids*; this module owns the memory the ids point at.
Every layer gets one K and one V tensor shaped

    [num_blocks, block_size, num_kv_heads, head_dim]      ("NHD": token, head, dim)

so physical block ``b`` of layer ``l`` is ``k_caches[l][b]``, and a token's K for all its KV
heads is one contiguous row of ``num_kv_heads * head_dim`` elements. That makes the write
("put this token's K/V at slot s") a single contiguous copy, and lets an attention kernel read
a block's keys for one head as ``block_size`` rows of ``head_dim`` contiguous elements, which
vectorise into wide loads without any special layout. It is the layout of FlashAttention,
FlashInfer, vLLM's Triton backends and nano-vllm.

The cache is sized once, up front, from a budget: serving engines profile the model, then
give every remaining byte of GPU memory to KV blocks, and never allocate again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import runtime
from .attention import gather_kv, paged_decode_attention, store_kv
from .attention.triton_copy import check_copy_pairs, copy_blocks
from .attention.validate import SUPPORTED_DTYPES, check_backend
from .checks import check_whole, is_whole
from .specs import kv_bytes_per_token


def block_bytes(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes one block id costs across all layers, K and V together."""
    return block_size * kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype.itemsize)


class PagedKVCache:
    """``num_layers`` pairs of K/V tensors, each ``[num_blocks, block_size, num_kv_heads, head_dim]``."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        for name, value in (("num_layers", num_layers), ("num_blocks", num_blocks), ("block_size", block_size),
                            ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
            check_whole(name, value, 1)
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {dtype} is not supported; choose one of {', '.join(map(str, SUPPORTED_DTYPES))}")
        self.device = torch.device(device) if device is not None else runtime.device()
        self.dtype = dtype
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        # Zeros, not empty: a bug that reads an unwritten slot then gives a stable wrong answer.
        self.k_caches: list[torch.Tensor] = [torch.zeros(shape, dtype=dtype, device=self.device)
                                             for _ in range(num_layers)]
        self.v_caches: list[torch.Tensor] = [torch.zeros(shape, dtype=dtype, device=self.device)
                                             for _ in range(num_layers)]

    @classmethod
    def from_budget(
        cls,
        budget_bytes: int,
        num_layers: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> "PagedKVCache":
        """As many whole blocks as ``budget_bytes`` holds (K and V of every layer counted)."""
        check_whole("budget_bytes", budget_bytes, 1)
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {dtype} is not supported; choose one of {', '.join(map(str, SUPPORTED_DTYPES))}")
        per_block = block_bytes(num_layers, block_size, num_kv_heads, head_dim, dtype)
        if budget_bytes < per_block:
            raise ValueError(f"a budget of {budget_bytes} bytes is smaller than one block ({per_block} bytes "
                             f"for {num_layers} layers x K and V x {block_size} tokens)")
        return cls(num_layers, budget_bytes // per_block, block_size, num_kv_heads, head_dim, dtype, device)

    # --- shape and size ---------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.k_caches)

    @property
    def num_blocks(self) -> int:
        return self.k_caches[0].shape[0]

    @property
    def block_size(self) -> int:
        return self.k_caches[0].shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.k_caches[0].shape[2]

    @property
    def head_dim(self) -> int:
        return self.k_caches[0].shape[3]

    @property
    def bytes_per_block(self) -> int:
        return block_bytes(self.num_layers, self.block_size, self.num_kv_heads, self.head_dim, self.dtype)

    @property
    def bytes(self) -> int:
        """Total memory of every K and V tensor."""
        return self.num_blocks * self.bytes_per_block

    # --- writes and reads -------------------------------------------------------------
    def _layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not is_whole(layer) or not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer!r} is out of range for a cache of {self.num_layers} layers")
        return self.k_caches[layer], self.v_caches[layer]

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
              backend: str = "torch", *, check: bool = True) -> None:
        """Write ``k``, ``v`` (``[N, num_kv_heads, head_dim]``) of ``layer`` at ``slot_mapping`` (-1 skips)."""
        k_cache, v_cache = self._layer(layer)
        store_kv(k, v, k_cache, v_cache, slot_mapping, backend, check=check)

    def gather(self, layer: int, block_table: Sequence[int] | torch.Tensor,
               seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One sequence's contiguous K and V, ``[seq_len, num_kv_heads, head_dim]`` each."""
        k_cache, v_cache = self._layer(layer)
        return gather_kv(k_cache, block_table, seq_len), gather_kv(v_cache, block_table, seq_len)

    def decode_attention(self, layer: int, q: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor,
                         **kwargs: Any) -> torch.Tensor:
        """:func:`pagedkv_edu.attention.paged_decode_attention` over ``layer``'s K and V."""
        k_cache, v_cache = self._layer(layer)
        return paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, **kwargs)

    def copy_blocks(self, pairs: Sequence[tuple[int, int]], backend: str = "torch") -> None:
        """Copy-on-write's data move: for every layer, K and V of block ``src`` into block ``dst``.

        ``pairs`` come from :meth:`BlockManager.take_copies`; all sources are read before any
        destination is written. Every pair is checked before the first layer is touched.
        """
        check_backend(backend)
        check_copy_pairs(pairs, self.num_blocks)
        for k_cache, v_cache in zip(self.k_caches, self.v_caches):
            copy_blocks(k_cache, v_cache, pairs, backend, check=False)

    def __repr__(self) -> str:
        return (f"PagedKVCache(num_layers={self.num_layers}, num_blocks={self.num_blocks}, "
                f"block_size={self.block_size}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"dtype={self.dtype}, device={self.device}, bytes={self.bytes})")
