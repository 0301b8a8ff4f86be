"""One record per sequence: its tokens, how many have K/V in memory, its block hashes, its status (chapter 6).

The scheduler, the block manager and the engine read this one record, as nano-vllm's ``Sequence``
and vLLM's ``Request``. ``num_computed_tokens`` is the sequence's only token count: the block
manager reads it and never writes it, the scheduler advances it when it schedules tokens and
resets it when a preemption frees the K/V. Pure Python: the engine's random generator and
log-probabilities ride on the record untyped.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checks import check_token_ids, check_whole
from .prefix_cache import ROOT_HASH, BlockHash, BlockHasher


class Status(enum.Enum):
    """Where a sequence is in its life. WAITING, PREEMPTED and SWAPPED sequences sit in the waiting queue."""

    WAITING = "waiting"        # queued, never ran
    RUNNING = "running"        # holds memory and runs every step
    PREEMPTED = "preempted"    # its blocks were freed: its K/V will be recomputed (num_computed_tokens == 0)
    SWAPPED = "swapped"        # its blocks were copied to host memory: they come back, nothing is recomputed
    FINISHED = "finished"      # done (or failed); holds nothing


@dataclass(frozen=True)
class SamplingParams:
    """What a request asks for. ``temperature == 0`` is greedy decoding."""

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    n: int = 1                 # completions of the same prompt (parallel sampling, chapter 7)

    def __post_init__(self) -> None:
        check_whole("n (the number of completions)", self.n, 1)
        check_whole("max_tokens", self.max_tokens)
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        if any(not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty, got {self.stop!r}")


@dataclass(eq=False)
class Request:
    """One sequence. ``eq=False``: two records are equal only if they are the same one (a dict key by identity).

    ``prompt_token_ids`` may be None when only the prompt's length matters (the memory-only
    simulator); ``num_prompt_tokens`` then says how long it is. ``num_seqs`` is the seats it
    takes under ``max_num_seqs``: a request's ``n`` until its samples are forked off, then 1.
    """

    seq_id: Hashable
    prompt_token_ids: list[int] | None
    params: SamplingParams = field(default_factory=SamplingParams)
    generator: Any = None             # the engine's torch.Generator for this sample
    arrival_time: float = 0.0
    request_id: Hashable = None       # the request this sequence samples for (its own seq_id unless forked)
    index: int = 0                    # which of the request's n samples (0 for the first)
    num_prompt_tokens: int = -1       # len(prompt_token_ids) when the ids are known
    output_token_ids: list[int] = field(default_factory=list)
    num_seqs: int = 1
    # --- kept by the scheduler ---------------------------------------------------------
    status: Status = Status.WAITING
    num_computed_tokens: int = 0      # tokens whose K/V are in memory (after the step scheduled now)
    prompt_end: int = 0               # tokens its current (re)prefill covers: computed below it is prefill
    num_cached_tokens: int = 0        # prompt tokens the prefix cache supplied at its first prefill
    num_preemptions: int = 0
    # --- kept by the engine: the timeline --------------------------------------------
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)   # when each output token was sampled (TTFT, ITL)
    finish_time: float | None = None
    finish_reason: str | None = None
    text: str | None = None           # set when a stop string cut it; else decoded at the end
    last_logprobs: Any = field(default=None, repr=False)   # [vocab] log-probs it last sampled from (keep_logprobs)
    # --- the hash chain of its full blocks, made by one hasher ---------------------------
    hasher: BlockHasher | None = field(default=None, repr=False)
    _hashes: list[BlockHash] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.request_id is None:
            self.request_id = self.seq_id
        if self.prompt_token_ids is not None:
            self.prompt_token_ids = check_token_ids(self.prompt_token_ids, "prompt_token_ids")
            self.num_prompt_tokens = len(self.prompt_token_ids)
        if self.num_prompt_tokens < 1:
            raise ValueError(f"sequence {self.seq_id!r}: a prompt needs at least one token, got "
                             f"{self.num_prompt_tokens}")

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: all must be in the cache before it samples its next one."""
        return self.num_prompt_tokens + len(self.output_token_ids)

    @property
    def max_num_tokens(self) -> int:
        """The most tokens it can hold in memory: its prompt, and every token it may generate but the last."""
        return self.num_prompt_tokens + max(self.params.max_tokens - 1, 0)

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
        if self.prompt_token_ids is None:
            raise ValueError(f"sequence {self.seq_id!r}: its prompt's token ids are unknown (a memory-only record)")
        return self.prompt_token_ids[start:end] + self.output_token_ids[:max(0, end - p)]

    def block_hashes(self, hasher: BlockHasher, num_blocks: int | None = None) -> Sequence[BlockHash]:
        """The hash chain of its first ``num_blocks`` full blocks (default: all), each hashed once in its life.

        The first call binds ``hasher`` to the record; a later call with another hasher is
        refused (its hashes would be stale: chapter 8's reader hash against the package's).
        Tokens only ever append, so a full block's hash never changes.
        """
        if self.hasher is None:
            self.hasher = hasher
        elif self.hasher != hasher:
            raise ValueError(f"sequence {self.seq_id!r} was hashed with {self.hasher}; this cache hashes with "
                             f"{hasher}: give it a fresh record")
        full = self.num_tokens // hasher.block_size if num_blocks is None else num_blocks
        if len(self._hashes) < full:
            size = hasher.block_size
            for i in range(len(self._hashes), full):
                parent = self._hashes[-1] if self._hashes else ROOT_HASH
                self._hashes.append(hasher.hash_fn(parent, self.tokens(i * size, (i + 1) * size)))
        return self._hashes

    def fork(self, seq_id: Hashable, index: int, generator: Any = None) -> "Request":
        """A new sample of the same request that continues from this one's tokens, hashes and timeline.

        The record only; :meth:`Scheduler.fork <pagedkv_edu.core.scheduler.Scheduler.fork>`
        shares its memory and sets its scheduling state.
        """
        child = Request(seq_id, self.prompt_token_ids, self.params, generator, self.arrival_time, self.request_id,
                        index, self.num_prompt_tokens, list(self.output_token_ids), hasher=self.hasher,
                        _hashes=list(self._hashes))
        child.num_cached_tokens = self.num_cached_tokens
        child.first_token_time = self.first_token_time
        child.token_times = list(self.token_times)
        return child


__all__ = ["Request", "SamplingParams", "Status"]
