"""Slot-mapped K/V writes in Triton: the store half of paged attention (chapter 3).

One kernel for prefill and decode alike (vLLM's ``reshape_and_cache_flash``, nano-vllm's
``store_kvcache``): each program copies ``TOKENS`` rows to their slots; slot -1 is not written.
"""

from __future__ import annotations

import torch

from .. import runtime  # noqa: F401  (sets TRITON_INTERPRET before triton is imported)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

ELEMENTS_PER_PROGRAM = 4096
"""About this many elements per program (per K and per V): enough work to hide a launch."""


@triton.jit
def store_kv_kernel(
    k_ptr,         # [num_tokens, num_kv_heads, head_dim], head_dim contiguous
    v_ptr,         # [num_tokens, num_kv_heads, head_dim], head_dim contiguous
    k_cache_ptr,   # [num_blocks, block_size, num_kv_heads, head_dim], contiguous: a slot is one ROW
    v_cache_ptr,   # same shape as k_cache, contiguous
    slot_ptr,      # int [num_tokens], contiguous: block * block_size + offset, or -1: do not write
    num_tokens,    # rows of k and v
    stride_kn, stride_kh, stride_vn, stride_vh,   # k's and v's strides: token, head
    HEAD_DIM: tl.constexpr, ROW: tl.constexpr, ROW_PAD: tl.constexpr, TOKENS: tl.constexpr,
):
    """Copy ``TOKENS`` tokens' K and V rows (``ROW = num_kv_heads * head_dim``) to their slots."""
    offs_t = (tl.program_id(0) * TOKENS + tl.arange(0, TOKENS)).to(tl.int64)
    in_batch = offs_t < num_tokens
    slot = tl.load(slot_ptr + offs_t, mask=in_batch, other=-1).to(tl.int64)
    offs_c = tl.arange(0, ROW_PAD)
    head = offs_c // HEAD_DIM
    d = offs_c % HEAD_DIM
    mask = ((slot >= 0) & in_batch)[:, None] & (offs_c < ROW)[None, :]
    dst = slot[:, None] * ROW + offs_c[None, :]  # the cache is contiguous: a slot is one ROW
    k = tl.load(k_ptr + offs_t[:, None] * stride_kn + head[None, :] * stride_kh + d[None, :], mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)
    v = tl.load(v_ptr + offs_t[:, None] * stride_vn + head[None, :] * stride_vh + d[None, :], mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


def store_kv_triton(
    k: torch.Tensor,              # [num_tokens, num_kv_heads, head_dim]
    v: torch.Tensor,              # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,        # [num_blocks, block_size, num_kv_heads, head_dim], contiguous
    v_cache: torch.Tensor,        # same shape as k_cache, contiguous
    slot_mapping: torch.Tensor,   # int [num_tokens], -1: do not write
) -> None:
    """Launch :func:`store_kv_kernel`; inputs must be validated already."""
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    k = k if k.stride(-1) == 1 else k.contiguous()
    v = v if v.stride(-1) == 1 else v.contiguous()
    slot_mapping = slot_mapping.contiguous()  # the kernel reads slot_mapping[i] at offset i
    row = num_kv_heads * head_dim
    row_pad = triton.next_power_of_2(row)
    tokens = max(1, min(triton.next_power_of_2(num_tokens), ELEMENTS_PER_PROGRAM // row_pad))
    grid = (triton.cdiv(num_tokens, tokens),)
    store_kv_kernel[grid](
        k, v, k_cache, v_cache, slot_mapping, num_tokens,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        HEAD_DIM=head_dim, ROW=row, ROW_PAD=row_pad, TOKENS=tokens,
    )
