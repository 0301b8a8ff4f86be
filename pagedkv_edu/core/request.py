"""One record per sequence: its tokens, how many have K/V in memory, its block hashes, its status (chapter 6).

The scheduler, the engine and the swap path read and write this one record, as nano-vllm's
``Sequence`` and vLLM's ``Request``; the block manager keeps block tables only. A fork is a
new record whose ``parent`` is the forked one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch

from .scheduler import Status
from ..engine.sampling import SamplingParams


BlockHashFn = Callable[[bytes, list[int]], bytes]


@dataclass(eq=False)
class Request:
    """One sequence inside the engine. ``eq=False``: two records are equal only if they are the same one.

    ``prompt_token_ids`` may be None when only the prompt's length matters (the memory-only
    simulator); ``num_prompt_tokens`` then says how long it is.
    """

    seq_id: Hashable
    prompt_token_ids: list[int] | None
    params: SamplingParams = field(default_factory=SamplingParams)
    generator: torch.Generator | None = None
    arrival_time: float = 0.0
    request_id: Hashable = None       # the request this sequence samples for (its own seq_id unless forked)
    index: int = 0                    # which of the request's n samples (0 for the first)
    parent: "Request | None" = None   # the sequence it was forked from
    num_prompt_tokens: int = -1       # len(prompt_token_ids) when the ids are known
    output_token_ids: list[int] = field(default_factory=list)
    # --- kept by the scheduler ---------------------------------------------------------
    status: Status = Status.WAITING
    num_computed_tokens: int = 0      # tokens whose K/V are in memory (after the step scheduled now)
    prompt_end: int = 0               # tokens its current (re)prefill covers: computed below it is prefill
    block_hashes: list[bytes] = field(default_factory=list)   # hash chain of its full blocks, each hashed once
    num_cached_tokens: int = 0        # prompt tokens the prefix cache supplied at its first prefill
    num_preemptions: int = 0
    # --- kept by the engine: the timeline --------------------------------------------
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)   # when each output token was sampled (TTFT, ITL)
    finish_time: float | None = None
    finish_reason: str | None = None
    text: str | None = None           # set when a stop string cut it; else decoded at the end
    forked: bool = False              # its n > 1 samples exist (sample 0 only)
    last_logprobs: torch.Tensor | None = field(default=None, repr=False)   # [vocab] log-probs it last sampled from

    def __post_init__(self) -> None:
        if self.request_id is None:
            self.request_id = self.seq_id
        if self.prompt_token_ids is not None:
            self.num_prompt_tokens = len(self.prompt_token_ids)
        if self.num_prompt_tokens < 1:
            raise ValueError(f"sequence {self.seq_id!r}: a prompt needs at least one token, got "
                             f"{self.num_prompt_tokens}")

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: all must be in the cache before it samples its next one."""
        return self.num_prompt_tokens + len(self.output_token_ids)

    @property
    def num_seqs(self) -> int:
        """Sequences it takes under ``max_num_seqs``: all ``n`` samples until they are forked off."""
        return self.params.n if self.index == 0 and not self.forked else 1

    @property
    def token_ids(self) -> list[int] | None:
        """Prompt plus generated tokens (None when the prompt's ids are unknown)."""
        return None if self.prompt_token_ids is None else self.prompt_token_ids + self.output_token_ids

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def tokens(self, start: int, end: int) -> list[int]:
        """Token ids ``start .. end-1`` of prompt-then-output, without joining the two lists."""
        p = self.num_prompt_tokens
        if start >= p:
            return self.output_token_ids[start - p:end - p]
        assert self.prompt_token_ids is not None, "the prompt's ids are unknown"
        return self.prompt_token_ids[start:end] + self.output_token_ids[:max(0, end - p)]

    def hashes(self, block_size: int, hash_fn: BlockHashFn, root: bytes = b"") -> list[bytes]:
        """The hash chain of every full block of its tokens so far, extended only by blocks not hashed before.

        Each block is hashed once in the request's life (tokens only ever append, so a full
        block's hash never changes); the list is the record's own ``block_hashes``.
        """
        full = self.num_tokens // block_size
        if len(self.block_hashes) < full:
            assert self.prompt_token_ids is not None, "hashing needs the prompt's ids"
            for i in range(len(self.block_hashes), full):
                parent = self.block_hashes[-1] if self.block_hashes else root
                self.block_hashes.append(hash_fn(parent, self.tokens(i * block_size, (i + 1) * block_size)))
        return self.block_hashes

    def fork(self, seq_id: Hashable, index: int, generator: torch.Generator | None = None) -> "Request":
        """A new sample of the same request that continues from this one's tokens.

        The record only; :meth:`Scheduler.fork <pagedkv_edu.core.scheduler.Scheduler.fork>` shares
        its memory and sets its scheduling state.
        """
        child = Request(seq_id, self.prompt_token_ids, self.params, generator, self.arrival_time,
                        self.request_id, index, self, self.num_prompt_tokens, list(self.output_token_ids))
        child.block_hashes = list(self.block_hashes)
        child.num_cached_tokens = self.num_cached_tokens
        child.first_token_time = self.first_token_time
        child.token_times = list(self.token_times)
        return child


__all__ = ["Request", "Status"]
