"""Does the Triton interpreter compute bfloat16 correctly? Measured against float64 (chapter 5).

NumPy has no bfloat16, so the interpreter carries bf16 as raw 16-bit patterns. Three relative
errors (largest difference / largest reference magnitude): a bare bf16 ``tl.dot``, the book's
paged attention on a bf16 cache, and the fp32 -> bf16 cast (the interpreter truncates, so its
error reaches 2^-7, not 2^-8). A correct bf16 computation lands near 2^-8 = 0.0039.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import runtime  # imported before triton: it sets TRITON_INTERPRET on a CPU
from ..attention import paged_attention
from ..model.paged_batch import random_paged_step
from ..attention.reference import paged_attention_float64

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BF16_UNIT = 2.0 ** -8
"""bfloat16 keeps 8 significant bits, so numbers are 2^-7 apart at 1 (``torch.finfo(torch.bfloat16).eps``):
one rounding to nearest is off by at most half of that, this, relatively."""


TRUNCATION_BOUND = 2.0 ** -7
"""Dropping bits instead of rounding is off by up to one whole spacing, 2^-7 relatively: the bound for one
interpreter cast to bf16, and for two round-to-nearest roundings on a GPU (its kernel rounds the
probabilities to bf16 before the second dot, then the output)."""


@triton.jit
def _cast_kernel(x_ptr, y_ptr, N: tl.constexpr):
    """y = x.to(bfloat16): the one line whose rounding is measured."""
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16))


@dataclass(frozen=True)
class CastError:
    """The fp32 -> bf16 cast of ``n`` random values, against torch's round-to-nearest-even."""

    n: int
    differ: int            # values whose bf16 result is not torch's
    max_relative: float    # largest |bf16(x) - x| / |x|
    torch_max_relative: float   # the same for torch's cast: at most 2^-8


def cast_error(n: int = 4096, seed: int = 0) -> CastError:
    """Cast ``n`` random fp32 values to bf16 in a Triton kernel and with torch; compare."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen).to(runtime.device())
    y = torch.empty(n, dtype=torch.bfloat16, device=x.device)
    _cast_kernel[(1,)](x, y, n)
    want = x.to(torch.bfloat16)
    x64 = x.double()
    return CastError(n, int((y != want).sum()), float(((y.double() - x64).abs() / x64.abs()).max()),
                     float(((want.double() - x64).abs() / x64.abs()).max()))


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """c = a @ b for one [M, K] x [K, N] tile, in the tiles' own dtype (no cast)."""
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b))


def _relative(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).abs().max() / ref.abs().max())


def raw_dot_error(dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> float:
    """Relative error of one bare ``tl.dot`` of ``dtype`` tiles [16, 32] x [32, 16] against float64."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(16, 32, generator=gen).to(dtype).to(runtime.device())
    b = torch.randn(32, 16, generator=gen).to(dtype).to(runtime.device())
    c = torch.empty(16, 16, dtype=torch.float32, device=a.device)
    _dot_kernel[(1,)](a, b, c, 16, 16, 32)
    return _relative(c, a.double() @ b.double())


@dataclass(frozen=True)
class AttentionError:
    """Relative errors against float64 of one paged-attention step computed in bf16."""

    triton: float        # the book's Triton kernels (``backend="triton"``)
    torch_bf16: float    # the torch gather reference computing in bf16: the cost of bf16 itself

    @property
    def correct(self) -> bool:
        """Triton within twice what bf16 itself costs, and within a few rounding units."""
        return self.triton <= max(2 * self.torch_bf16, 4 * BF16_UNIT)


def attention_error(num_heads: int = 32, num_kv_heads: int = 8, head_dim: int = 64, seed: int = 0) -> AttentionError:
    """One step of Llama-3.2-1B's head shape on a bf16 paged cache: a 21-token prompt, the
    rest of a 40-token prompt after a 16-token prefix, and two decode tokens; then the same
    with decode tokens only (the decode kernel's path)."""
    worst_triton, worst_torch = 0.0, 0.0
    for seq_lens, query_lens in (([21, 40, 9, 33], [21, 24, 1, 1]), ([37, 18], [1, 1])):
        step = random_paged_step(seq_lens, query_lens, 16, num_heads, num_kv_heads, head_dim, torch.bfloat16,
                                 seed=seed)
        args = step.args()
        ref = paged_attention_float64(*args)
        worst_triton = max(worst_triton, _relative(paged_attention(*args, backend="triton"), ref))
        worst_torch = max(worst_torch, _relative(paged_attention(*args, backend="torch"), ref))
    return AttentionError(worst_triton, worst_torch)
