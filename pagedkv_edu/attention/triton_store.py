"""Slot-mapped K/V writes in Triton: the store half of paged attention.

Each step of the model produces K and V for some new tokens: one per sequence at decode, a
whole prompt at prefill. ``slot_mapping[i]`` (computed from the block table as
``table[pos // B] * B + pos % B``) says which flat cache slot token ``i`` goes to; -1 marks a
padding token that must not be written. The kernel is the same for both phases: each program
copies ``TOKENS`` rows of ``num_kv_heads * head_dim`` elements, so a decode step of a small
batch is one or a few programs and a long prefill is many. This is what vLLM's
``reshape_and_cache_flash`` and nano-vllm's ``store_kvcache`` kernel do.
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
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, num_tokens,
    stride_kn, stride_kh, stride_vn, stride_vh,
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
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
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
