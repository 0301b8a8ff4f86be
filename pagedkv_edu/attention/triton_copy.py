"""Whole-block K/V copies in Triton: the data half of copy-on-write (chapter 7).

vLLM v0's ``copy_blocks`` kernel: each ``(source, destination)`` block pair is one flat copy per
layer. A step's copies read every source as it was before any destination is written; when a
block is both (freed and reused in one step), :func:`copy_blocks` takes the torch path, which
gathers the sources first, instead of racing programs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import runtime  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)
from .validate import check_backend, check_cache_pair

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

CHUNK_ELEMENTS = 4096
"""Elements per program (per K and per V); a block of 16 tokens x 8 heads x 64 is 8,192."""


@triton.jit
def copy_blocks_kernel(k_cache_ptr,   # [num_blocks, block_size, num_kv_heads, head_dim], contiguous
                       v_cache_ptr,   # same shape as k_cache, contiguous
                       src_ptr,       # int64 [num_pairs], source block ids
                       dst_ptr,       # int64 [num_pairs], destination block ids, distinct
                       block_elems,   # elements per block: block_size * num_kv_heads * head_dim
                       CHUNK: tl.constexpr):
    """Copy chunk ``program_id(1)`` of block ``src[p]`` to block ``dst[p]``, ``p = program_id(0)``, in K and V."""
    pair = tl.program_id(0)
    src = tl.load(src_ptr + pair).to(tl.int64)
    dst = tl.load(dst_ptr + pair).to(tl.int64)
    offs = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = offs < block_elems
    k = tl.load(k_cache_ptr + src * block_elems + offs, mask=mask)
    tl.store(k_cache_ptr + dst * block_elems + offs, k, mask=mask)
    v = tl.load(v_cache_ptr + src * block_elems + offs, mask=mask)
    tl.store(v_cache_ptr + dst * block_elems + offs, v, mask=mask)


def check_copy_pairs(pairs: Sequence[tuple[int, int]], num_blocks: int) -> None:
    """Every pair is two block ids in range, a block is not copied onto itself, destinations are distinct."""
    seen: set[int] = set()
    for pair in pairs:
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in pair)):
            raise ValueError(f"a copy is a (source, destination) pair of block ids, got {pair!r}")
        src, dst = pair
        for name, block in (("source", src), ("destination", dst)):
            if not 0 <= block < num_blocks:
                raise ValueError(f"copy {pair}: {name} block {block} is out of range for a cache of {num_blocks} blocks")
        if src == dst:
            raise ValueError(f"copy {pair}: a block cannot be copied onto itself")
        if dst in seen:
            raise ValueError(f"copy {pair}: block {dst} is the destination of two copies")
        seen.add(dst)


def copy_blocks_torch(k_cache: torch.Tensor, v_cache: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """The reference: ``cache[dst] = cache[src]``; indexing gathers the sources before the write."""
    k_cache[dst] = k_cache[src]
    v_cache[dst] = v_cache[src]


def copy_blocks_triton(k_cache: torch.Tensor, v_cache: torch.Tensor,   # [num_blocks, block_size, kv_heads, head_dim]
                       src: torch.Tensor, dst: torch.Tensor) -> None:   # int64 [num_pairs] each
    """Launch :func:`copy_blocks_kernel` over every pair; inputs must be validated already."""
    if src.numel() == 0:
        return
    block_elems = k_cache[0].numel()
    chunk = min(triton.next_power_of_2(block_elems), CHUNK_ELEMENTS)
    grid = (src.numel(), triton.cdiv(block_elems, chunk))
    copy_blocks_kernel[grid](k_cache, v_cache, src, dst, block_elems, CHUNK=chunk)


def copy_indices(pairs: Sequence[tuple[int, int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The pairs' source and destination ids as int64 tensors, and whether a block is both (then torch copies)."""
    src = torch.tensor([s for s, _ in pairs], dtype=torch.int64, device=device)
    dst = torch.tensor([d for _, d in pairs], dtype=torch.int64, device=device)
    return src, dst, not {s for s, _ in pairs}.isdisjoint(d for _, d in pairs)


def copy_blocks(k_cache: torch.Tensor, v_cache: torch.Tensor, pairs: Sequence[tuple[int, int]],
                backend: str = "torch", *, check: bool = True) -> None:
    """Copy K and V of block ``src`` to block ``dst`` for each ``(src, dst)`` in ``pairs``, in place.

    All sources are read before any destination is written. ``check=False`` skips validating
    the caches and the pairs (for callers that did it once for every layer).
    """
    check_backend(backend)
    if check:
        num_blocks = check_cache_pair(k_cache, v_cache)[0]
        check_copy_pairs(pairs, num_blocks)
    if not pairs:
        return
    src, dst, overlapping = copy_indices(pairs, k_cache.device)
    if backend == "torch" or overlapping:
        copy_blocks_torch(k_cache, v_cache, src, dst)
    else:
        copy_blocks_triton(k_cache, v_cache, src, dst)
