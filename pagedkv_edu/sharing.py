"""Sharing blocks without a model: what fork and the prefix cache save on a workload (chapters 7, 8).

Chapter 7's engine runs a real model, which on a CPU means small, scaled-down requests.
Memory does not need the model: which blocks a sequence holds depends only on token counts
and, for the prefix cache, token ids. So this module drives the real block manager (the
same code the engine uses) with the paged-KV-cache article's workload at full size:

* :func:`parallel_sampling_blocks` forks a prompt into ``n`` samples and counts the blocks
  held at every decode step, against ``n`` independent copies of the request;
* :func:`few_shot_variant` turns the workload's 200-token system prompt into a 5-shot prompt
  of about 1,000 shared tokens.

Serving a whole workload with or without the prefix cache is the memory simulator's job:
``simulate(requests, "paged", enable_prefix_caching=True)`` (:mod:`pagedkv_edu.simulate`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .block_manager import BlockManager
from .block_table import blocks_needed
from .checks import check_whole
from .workload import MAX_SEQ_LEN, Request

SHOT_TOKENS = 160
"""Tokens of one worked example in the few-shot variant (5 shots + the 200-token system prompt ≈ 1,000)."""


def few_shot_variant(requests: list[Request], shots: int = 5, *, length_scale: float = 1.0) -> list[Request]:
    """The same requests with ``shots`` worked examples added to the shared part of every prompt.

    Pass the ``length_scale`` the requests were drawn with, so the examples shrink alike.
    Prompts grow by the same amount, so pair the variant with :func:`few_shot_max_seq_len`.
    """
    check_whole("shots", shots)
    extra = round(shots * SHOT_TOKENS * length_scale)
    return [dataclasses.replace(r, prompt_len=r.prompt_len + extra, shared_prefix_len=r.shared_prefix_len + extra)
            for r in requests]


def few_shot_max_seq_len(shots: int = 5, *, length_scale: float = 1.0) -> int:
    """The workload's context (2,048) plus the examples' tokens, at the same scale."""
    return max(1, round((MAX_SEQ_LEN + shots * SHOT_TOKENS) * length_scale))


# --- parallel sampling -------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplingMemory:
    """Blocks held at each decode step by ``n`` forked samples, and by ``n`` independent copies."""

    shared: list[int]
    independent: list[int]
    copies: int        # copy-on-write block copies the samples made

    @property
    def saving(self) -> float:
        """Share of the independent copies' block-steps that sharing saves (the paper's measure)."""
        return 1 - sum(self.shared) / sum(self.independent)


def parallel_sampling_blocks(prompt_len: int, output_len: int, n: int, block_size: int) -> SamplingMemory:
    """Fork a ``prompt_len`` prompt into ``n`` samples that each decode ``output_len`` tokens.

    The first sample is prefilled, the others fork from it, and each decode step appends
    one token to every sample (copy-on-write on the first append into the shared last block).
    Independent copies hold ``n`` times the blocks of one sequence of the same length.
    """
    if min(prompt_len, n) < 1 or output_len < 0:
        raise ValueError(f"need prompt_len >= 1, n >= 1 and output_len >= 0, got {prompt_len}, {n}, {output_len}")
    manager = BlockManager(n * blocks_needed(prompt_len + output_len, block_size), block_size)
    manager.add_sequence(0, prompt_len)
    for i in range(1, n):
        manager.fork(0, i)
    shared, independent, copies = [], [], 0
    for step in range(1, output_len + 1):
        for i in range(n):
            manager.append_tokens(i)
        copies += len(manager.take_copies())
        shared.append(manager.pool.num_used)
        independent.append(n * blocks_needed(prompt_len + step, block_size))
    return SamplingMemory(shared or [manager.pool.num_used], independent or [n * blocks_needed(prompt_len, block_size)],
                          copies)


def workload_sampling_saving(requests: list[Request], n: int, block_size: int) -> float:
    """:attr:`SamplingMemory.saving` over every request of a workload, each sampled ``n`` times."""
    runs = [parallel_sampling_blocks(r.prompt_len, r.output_len, n, block_size) for r in requests]
    return 1 - sum(sum(m.shared) for m in runs) / sum(sum(m.independent) for m in runs)
