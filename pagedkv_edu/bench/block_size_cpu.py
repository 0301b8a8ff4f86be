"""Timing a block-size sweep of the PyTorch reference decode on a CPU (chapter 9's fallback figure).

A demonstration of how to time the sweep, not a result about GPUs: chapter 9 plots a committed GPU
record of ``bench attention`` when one exists, and this CPU curve only otherwise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from ..attention import paged_decode_attention
from ..sim.block_size import BLOCK_SIZES
from ..model.paged_batch import random_paged_batch


def cpu_reference_times(block_sizes: Sequence[int] = BLOCK_SIZES, *, batch: int = 8, context: int = 512,
                        num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64,
                        repeats: int = 5) -> dict[int, float]:
    """Median milliseconds of the PyTorch reference decode (gather, then attention) per block size.

    This is the CPU reference, not the GPU kernel: it shows how to time a block-size sweep, and
    nothing about a GPU's memory system. Its curve depends on the CPU and on how busy it is, so
    chapter 9 draws no conclusion from its shape.
    """
    times = {}
    for b in block_sizes:
        pb = random_paged_batch([context] * batch, b, num_heads, num_kv_heads, head_dim, torch.float32,
                                device="cpu", seed=b, poison=False)
        args = (pb.q, pb.k_cache, pb.v_cache, pb.block_tables, pb.seq_lens)
        paged_decode_attention(*args, backend="torch")   # warm up
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            paged_decode_attention(*args, backend="torch")
            samples.append((time.perf_counter() - start) * 1e3)
        times[b] = statistics.median(samples)
    return times
