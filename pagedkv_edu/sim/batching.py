"""Static against continuous batching, and chunked prefill, on a modelled clock (chapter 6).

The engine with a :class:`~pagedkv_edu.engine.runner.StandInRunner` serves the same requests
two ways: a new batch of ``max_num_seqs`` only when the last one has finished (static), or each
request on arrival (continuous). A :class:`~pagedkv_edu.sim.decode_cost.StepCost` turns each
step's work into deterministic milliseconds, and requests arrive on that clock (``arrival_ms``), so
the same arrival lands at the same time whatever the budget; chapter 6 reads throughput, TTFT and
inter-token latency from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.block_manager import BlockManager
from ..checks import check_whole
from ..workload import Request
from ..specs import get_spec
from .decode_cost import StepCost
from ..engine.engine import LLMEngine
from ..engine.runner import StandInRunner
from ..engine.sampling import SamplingParams

MODES: tuple[str, ...] = ("static", "continuous")


@dataclass
class RequestTimes:
    """One request's clock: when it arrived, and when each of its tokens was sampled (model milliseconds)."""

    request_id: int
    prompt_len: int
    arrival: float
    token_times: list[float] = field(default_factory=list)
    first_token_step: int | None = None

    @property
    def ttft(self) -> float:
        """Time to first token: from arrival until its prompt is prefilled and its first token sampled."""
        return self.token_times[0] - self.arrival

    @property
    def gaps(self) -> list[float]:
        """The time between each pair of consecutive tokens."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]

    @property
    def itl(self) -> float:
        """Inter-token latency: the mean time between its consecutive tokens (0 for a one-token reply)."""
        gaps = self.gaps
        return sum(gaps) / len(gaps) if gaps else 0.0

    @property
    def latency(self) -> float:
        """End to end: from arrival to its last token."""
        return self.token_times[-1] - self.arrival


@dataclass(frozen=True)
class StepLog:
    """One engine step: the tokens it computed, split by kind, and the clock after it."""

    prefill_tokens: int
    decode_tokens: int
    running: int
    waiting: int
    preempted: int
    clock: float


@dataclass
class BatchingResult:
    """A run of :func:`serve`: every step and every request, and the figures chapter 6 prints."""

    mode: str
    max_num_seqs: int
    max_num_batched_tokens: int | None
    cost: StepCost
    steps: list[StepLog] = field(default_factory=list)
    requests: list[RequestTimes] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def time(self) -> float:
        return self.steps[-1].clock if self.steps else 0.0

    @property
    def output_tokens(self) -> int:
        return sum(len(r.token_times) for r in self.requests)

    @property
    def throughput(self) -> float:
        """Output tokens per model millisecond over the whole run."""
        return self.output_tokens / self.time

    @property
    def mean_ttft(self) -> float:
        return sum(r.ttft for r in self.requests) / len(self.requests)

    @property
    def mean_itl(self) -> float:
        """Inter-token latency, averaged over every gap between two tokens of a request."""
        gaps = [g for r in self.requests for g in r.gaps]
        return sum(gaps) / len(gaps) if gaps else 0.0

    @property
    def max_itl(self) -> float:
        """The longest wait between two tokens of one request: a decode stalled behind a long prefill."""
        return max((g for r in self.requests for g in r.gaps), default=0.0)

    def stalls(self, over: float) -> int:
        """Gaps between two tokens of a request longer than ``over``: decodes held up by a step's prefill."""
        return sum(g > over for r in self.requests for g in r.gaps)

    @property
    def mean_running(self) -> float:
        return sum(s.running for s in self.steps) / len(self.steps)

    @property
    def preemptions(self) -> int:
        return sum(s.preempted for s in self.steps)

    @property
    def mean_latency(self) -> float:
        return sum(r.latency for r in self.requests) / len(self.requests)

    def request(self, request_id: int) -> RequestTimes:
        return next(r for r in self.requests if r.request_id == request_id)


def serve(requests: Sequence[Request], mode: str = "continuous", *, kv_budget_tokens: int, max_num_seqs: int,
          block_size: int = 16, max_num_batched_tokens: int | None = None, watermark_blocks: int = 0,
          cost: StepCost | None = None, max_steps: int = 1_000_000) -> BatchingResult:
    """Serve ``requests`` (each arriving at its ``arrival_ms``) under ``mode``; returns every step's record.

    ``max_num_seqs`` is the batch: the size of a static batch, and the seats of continuous
    batching. ``max_num_batched_tokens`` is the token budget of a step (None: no cap, every
    prompt is prefilled whole). The memory is paged, ``kv_budget_tokens // block_size`` blocks.
    ``cost`` prices a step (default: Llama-3.2-1B on an H200). A request is handed over at the
    first step that starts at or after its arrival; an idle engine waits for the next arrival.
    """
    cost = cost or StepCost(get_spec("llama-3.2-1b"))
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    check_whole("kv_budget_tokens", kv_budget_tokens, 1)
    check_whole("block_size", block_size, 1)
    check_whole("max_num_seqs", max_num_seqs, 1)
    reqs = sorted(requests, key=lambda r: (r.arrival_ms, r.request_id))
    if not reqs:
        raise ValueError("no requests to serve")
    empty = [r.request_id for r in reqs if r.prompt_len < 1 or r.output_len < 1]
    if empty:
        raise ValueError(f"requests {empty} have an empty prompt or ask for no token")
    num_blocks = kv_budget_tokens // block_size
    too_big = [r.request_id for r in reqs if -(-r.final_len // block_size) > num_blocks]
    if too_big:
        raise ValueError(f"requests {too_big} can never fit in {num_blocks} blocks of {block_size}")
    engine = LLMEngine(StandInRunner(), memory=BlockManager(num_blocks, block_size, watermark_blocks=watermark_blocks),
                       max_seq_len=num_blocks * block_size, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=max_num_batched_tokens, keep_history=False)
    result = BatchingResult(mode, max_num_seqs, max_num_batched_tokens, cost)
    result.requests = [RequestTimes(r.request_id, r.prompt_len, r.arrival_ms) for r in reqs]
    times: list[RequestTimes] = []    # by the engine's request id, in the order handed over
    pending, clock = list(reqs), 0.0
    for step in range(max_steps):
        if pending and not engine.has_unfinished:
            clock = max(clock, pending[0].arrival_ms)     # idle: nothing runs until the next arrival
        arrived = [r for r in pending if r.arrival_ms <= clock]
        if mode == "continuous":
            handed = arrived
        else:   # a new batch only when the engine is empty
            handed = [] if engine.has_unfinished else arrived[:max_num_seqs]
        for r in handed:
            engine.add_request([0] * r.prompt_len, SamplingParams(max_tokens=r.output_len, ignore_eos=True))
            times.append(result.request(r.request_id))
            pending.remove(r)
        engine.step()
        decided = engine.last_step
        if decided.failed:   # cannot happen: every request was checked to fit the memory alone
            raise RuntimeError(f"requests {[times[s.seq_id].request_id for s in decided.failed]} failed to fit")
        prefill = sum(s.num_new_tokens for s in decided.scheduled if s.is_prefill)
        decode = sum(s.num_new_tokens for s in decided.scheduled if not s.is_prefill)
        clock += cost([(s.num_new_tokens, s.num_computed_tokens) for s in decided.scheduled])
        for s in decided.scheduled:
            if s.samples:                     # else a chunk of a prompt: no token yet
                t = times[s.seq.seq_id]
                t.token_times.append(clock)
                if t.first_token_step is None:
                    t.first_token_step = step
        result.steps.append(StepLog(prefill, decode, len(engine.scheduler.running),
                                    len(engine.scheduler.waiting) + len(pending), len(decided.preempted), clock))
        if not (pending or engine.has_unfinished):
            return result
    raise RuntimeError(f"serving did not finish within {max_steps} steps")


__all__ = ["MODES", "serve", "BatchingResult", "RequestTimes", "StepLog"]
