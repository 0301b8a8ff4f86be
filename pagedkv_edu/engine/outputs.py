"""What the engine hands back: finished requests, and the engine's state after each step.

:class:`SampleGroup` is a request's ``n`` samples (vLLM's ``ParentRequest``): it holds them while
they run and makes the :class:`RequestOutput` once the last one ends, so the engine's loop knows
nothing of groups.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.request import Request, Status
from ..core.scheduler import TokenCounts
from ..specs import utilisation


@dataclass(frozen=True)
class CompletionOutput:
    """One of a request's ``n`` samples (vLLM calls the list ``RequestOutput.outputs``)."""

    index: int
    token_ids: list[int]
    text: str
    finish_reason: str
    num_preemptions: int


@dataclass(frozen=True)
class RequestOutput:
    """A finished request, as ``step`` and ``generate`` return it.

    ``completions`` holds all ``n`` samples in index order; ``token_ids``, ``text`` and
    ``finish_reason`` are the first one's, so code written for ``n == 1`` reads as before.
    ``num_preemptions`` counts every sample's; ``finish_time`` is the last sample's. Every list is
    the output's own copy.
    """

    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    num_preemptions: int
    arrival_time: float
    first_token_time: float | None
    finish_time: float
    completions: tuple[CompletionOutput, ...] = ()
    num_cached_tokens: int = 0    # prompt tokens the prefix cache saved at the first prefill
    token_times: tuple[float, ...] = ()   # when each of the first sample's tokens was sampled

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def inter_token_latency(self) -> float | None:
        """Mean time between the first sample's consecutive tokens (None with fewer than two)."""
        t = self.token_times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None

    @property
    def latency(self) -> float:
        """End to end: from arrival to the last token."""
        return self.finish_time - self.arrival_time


@dataclass(frozen=True)
class EngineStats:
    """The engine's state after a step; ``tokens`` are the scheduler's counters at that moment."""

    step: int
    kv_usage: float
    num_running: int
    num_waiting: int
    num_preemptions: int
    generated_tokens: int
    elapsed: float
    kv_tokens: int        # tokens whose K/V are in the cache (a shared block's counted once)
    kv_held_slots: int    # slots held by requests: allocated blocks, or reserved ranges
    tokens: TokenCounts = field(default_factory=TokenCounts)
    step_kind: str = ""           # the step's kind (specs.step_kind), "" when idle
    step_tokens: int = 0          # tokens this step computed
    step_kv_tokens: int = 0       # context tokens its attention read (every scheduled sequence's length)

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens found in the prefix cache over prompt tokens, first prefills only."""
        return self.tokens.prefix_hit_rate

    @property
    def kv_utilisation(self) -> float:
        """Share of the held slots that hold a token (chapter 1's measure)."""
        return utilisation(self.kv_tokens, self.kv_held_slots)

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.elapsed if self.elapsed > 0 else 0.0


class SampleGroup:
    """A request's samples, index order; the first is the request's own record.

    ``make(index)`` builds sample ``index``'s record (the engine's, with its own generator). A
    request whose first sample ends before its prefill forked the others ends them too, with
    the same reason: they would have continued from the same prompt.
    """

    def __init__(self, first: Request, make: Callable[[int], Request]) -> None:
        self.request_id = first.request_id
        self.samples = [first]
        self.make = make

    @property
    def first(self) -> Request:
        return self.samples[0]

    @property
    def n(self) -> int:
        return self.first.params.n

    @property
    def forked(self) -> bool:
        """Its samples past the first exist (they fork off after the prompt's prefill)."""
        return len(self.samples) > 1 or self.n == 1

    def next_index(self) -> int:
        return max(s.index for s in self.samples) + 1

    def add(self, sample: Request) -> None:
        if any(s.seq_id == sample.seq_id for s in self.samples):
            raise ValueError(f"sequence {sample.seq_id!r} exists already")
        self.samples.append(sample)

    def drop(self, sample: Request) -> None:
        """Forget a sample that leaves without an output (a beam that lost)."""
        self.samples = [s for s in self.samples if s is not sample]

    def end(self, sample: Request, reason: str, decode: Callable[[list[int]], str]) -> bool:
        """Mark ``sample`` ended; True once every sample has (the group's output is ready)."""
        ending = [sample]
        if not self.forked:
            self.samples += [self.make(i) for i in range(1, self.n)]
            ending = self.samples
        for s in ending:
            s.finish_reason, s.status, s.finish_time = reason, Status.FINISHED, time.perf_counter()
            if s.text is None:
                s.text = decode(s.output_token_ids)
        return self.done

    @property
    def done(self) -> bool:
        return bool(self.samples) and all(s.finish_reason is not None for s in self.samples)

    def output(self) -> RequestOutput:
        first = self.first
        completions = tuple(CompletionOutput(s.index, list(s.output_token_ids), s.text or "", s.finish_reason or "",
                                             s.num_preemptions) for s in self.samples)
        started = [s.first_token_time for s in self.samples if s.first_token_time is not None]
        return RequestOutput(first.request_id, list(first.prompt_token_ids or []), list(completions[0].token_ids),
                             completions[0].text, completions[0].finish_reason,
                             sum(s.num_preemptions for s in self.samples), first.arrival_time,
                             min(started) if started else None, max(s.finish_time or 0.0 for s in self.samples),
                             completions, first.num_cached_tokens, tuple(first.token_times))


__all__ = ["CompletionOutput", "EngineStats", "RequestOutput", "SampleGroup"]
