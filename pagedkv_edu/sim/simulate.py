"""Serving a workload with no model: where every slot of a KV budget goes, contiguous against paged (chapters 1, 2).

It is the engine (:class:`~pagedkv_edu.engine.engine.LLMEngine`) with a
:class:`~pagedkv_edu.engine.runner.StandInRunner`: each request is a prompt length and an output
length, each step one engine step, measured while it runs (``used``, ``over_reserved``,
``internal``, ``external``, ``free``). Chapter 1 defines the wastes; chapters 6 and 8 reuse it for
preemption and prefix caching, chapter 9 for recompute against swap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.block_manager import BlockManager
from ..core.block_table import blocks_needed
from ..specs import utilisation
from ..checks import check_whole
from .contiguous import ALLOCATORS, ContiguousArena, ContiguousMemory, make_arena, reservation_size
from ..engine.engine import LLMEngine
from ..engine.runner import StandInRunner
from ..core.request import Request as SeqRecord
from ..engine.sampling import SamplingParams
from ..core.scheduler import ScheduledStep, TokenCounts
from ..engine.config import EngineConfig
from ..core.swap import SwapSpace
from .decode_cost import A100_PCIE, Device
from ..workload import MAX_SEQ_LEN, Request, prompt_token_ids

WASTE_KINDS = ("over_reserved", "internal", "external")


@dataclass(frozen=True)
class StepRecord:
    """Where the budget's slots were at the end of one step."""

    step: int
    running: int
    waiting: int
    used: int
    over_reserved: int
    internal: int
    external: int
    free: int


@dataclass
class RequestRecord:
    """One request's life in the simulation, in steps."""

    request_id: int
    arrival_step: int
    admit_step: int | None = None
    finish_step: int | None = None
    preemptions: int = 0

    @property
    def queue_delay(self) -> int:
        """Steps from arrival to first admission."""
        assert self.admit_step is not None
        return self.admit_step - self.arrival_step


@dataclass(frozen=True)
class ArenaSlice:
    """One contiguous reservation at a snapshot: where it sits and how much of it holds tokens."""

    request_id: int
    start: int
    size: int
    used: int
    final_len: int     # slots it will ever fill: prompt + output - 1 (the last token's K/V is never computed)


@dataclass
class SimResult:
    """Per-step records and per-request records of one simulated run, with summary figures."""

    policy: str
    block_size: int | None
    reserve: str | None
    capacity: int
    steps: list[StepRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    preemptions: int = 0
    arena_snapshots: dict[int, list[ArenaSlice]] = field(default_factory=dict)
    prefix_caching: bool = False
    tokens: TokenCounts = field(default_factory=TokenCounts)   # the scheduler's prefill counters at the end
    evictions: int = 0              # cached blocks reused for other content
    allocator: str | None = None    # the contiguous arena's allocator (first-fit or buddy)
    preemption_mode: str = "recompute"
    swapped_blocks: int = 0         # blocks copied to host memory (each comes back: as many copied in)

    def _sum(self, name: str) -> int:
        return sum(getattr(s, name) for s in self.steps)

    @property
    def utilisation(self) -> float:
        """Of the slots held by requests (or stranded between them), over all steps, the share holding tokens.

        The paper's measure (20.4-38.2% before vLLM): free, usable slots do not count."""
        held = sum(self._sum(k) for k in ("used", *WASTE_KINDS))
        return utilisation(self._sum("used"), held)

    @property
    def waste_fractions(self) -> dict[str, float]:
        """Each waste kind's share of the held slots (they add up to 1 - utilisation)."""
        held = sum(self._sum(k) for k in ("used", *WASTE_KINDS)) or 1
        return {k: self._sum(k) / held for k in WASTE_KINDS}

    @property
    def saturated_arena_utilisation(self) -> float:
        """Mean of used/capacity over the steps when some request was waiting for memory."""
        busy = [s.used / self.capacity for s in self.steps if s.waiting]
        return sum(busy) / len(busy) if busy else float("nan")

    @property
    def peak_concurrency(self) -> int:
        return max((s.running for s in self.steps), default=0)

    @property
    def mean_concurrency(self) -> float:
        return sum(s.running for s in self.steps) / len(self.steps) if self.steps else 0.0

    @property
    def saturated_concurrency(self) -> float:
        """Mean running requests over the steps when some request waited: how many the budget really held."""
        busy = [s.running for s in self.steps if s.waiting]
        return sum(busy) / len(busy) if busy else float("nan")

    @property
    def total_steps(self) -> int:
        return len(self.steps)

    @property
    def prefix_hit_rate(self) -> float:
        """Share of prompt tokens the prefix cache supplied, each prompt once (not ``resumed_hit_tokens``)."""
        return self.tokens.prefix_hit_rate

    @property
    def recomputed_tokens(self) -> int:
        """Prefill tokens computed again after preemptions (prefill less the prompts' own, less prefix hits)."""
        t = self.tokens
        return t.prefill_tokens - (t.prompt_tokens - t.prefix_hit_tokens)

    @property
    def mean_queue_delay(self) -> float:
        return sum(r.queue_delay for r in self.requests) / len(self.requests)

    @property
    def max_queue_delay(self) -> int:
        return max(r.queue_delay for r in self.requests)

    def max_waste_per_sequence(self) -> int:
        """Largest ``internal`` slots any one step held per running sequence (paged: < block size)."""
        return max((s.internal // s.running for s in self.steps if s.running), default=0)

    def summary(self) -> dict[str, object]:
        """The figures the CLI and the notebooks print."""
        t = self.tokens
        cache = {"prefix_caching": {"hit_rate": round(self.prefix_hit_rate, 4), "hit_tokens": t.prefix_hit_tokens,
                                    "prompt_tokens": t.prompt_tokens, "prefill_tokens": t.prefill_tokens,
                                    "resumed_hit_tokens": t.resumed_hit_tokens, "evictions": self.evictions}}
        return {
            "policy": self.policy,
            "block_size": self.block_size,
            "reserve": self.reserve,
            "capacity_tokens": self.capacity,
            "utilisation": round(self.utilisation, 4),
            "waste": {k: round(v, 4) for k, v in self.waste_fractions.items()},
            "saturated_arena_utilisation": round(self.saturated_arena_utilisation, 4),
            "peak_concurrency": self.peak_concurrency,
            "mean_concurrency": round(self.mean_concurrency, 2),
            "saturated_concurrency": round(self.saturated_concurrency, 2),
            "preemptions": self.preemptions,
            "total_steps": self.total_steps,
            "mean_queue_delay_steps": round(self.mean_queue_delay, 1),
            "max_queue_delay_steps": self.max_queue_delay,
            **(cache if self.prefix_caching else {}),
        }

    def to_dict(self) -> dict[str, object]:
        return {**self.summary(), "steps": [asdict(s) for s in self.steps],
                "requests": [asdict(r) for r in self.requests]}


def simulate(
    requests: Iterable[Request],
    policy: str = "paged",
    kv_budget_tokens: int = 10 * MAX_SEQ_LEN,
    *,
    block_size: int = 16,
    max_seq_len: int = MAX_SEQ_LEN,
    reserve: str = "max",
    allocator: str = "first-fit",
    watermark_blocks: int = 0,
    enable_prefix_caching: bool = False,
    vocab_size: int = 49152,
    prompt_seed: int = 0,
    max_steps: int = 1_000_000,
    snapshot_steps: Iterable[int] = (),
    max_num_batched_tokens: int | None = None,
    preemption_mode: str = "recompute",
    swap_space_tokens: int | None = None,
    block_manager: Callable[..., Any] = BlockManager,
) -> SimResult:
    """Serve ``requests`` on a KV budget of ``kv_budget_tokens`` slots under ``policy``.

    Contiguous only: ``reserve`` is the reservation rule (``max``, ``pow2``, ``oracle``),
    ``allocator`` the arena (``first-fit`` or the paper's ``buddy``), ``snapshot_steps`` the steps
    whose arena layout is kept. Paged only: ``watermark_blocks`` kept free at admission;
    ``enable_prefix_caching`` with prompt ids drawn from ``vocab_size`` and ``prompt_seed``;
    ``preemption_mode="swap"`` into ``swap_space_tokens`` host slots (default: the budget).
    ``max_num_batched_tokens`` caps the tokens a step computes (None: prompts prefilled whole).
    ``block_manager`` builds the paged memory, called as :class:`BlockManager` is (a reader's, from
    :meth:`Parts.memory <pagedkv_edu.exercises.my_engine.Parts.memory>`).

    Each step is :meth:`LLMEngine.step <pagedkv_edu.engine.engine.LLMEngine.step>` with a stand-in
    runner, measured while the step runs: a request finishes by the engine's rule, in the step
    that samples its last token, so it holds at most ``prompt + output - 1`` tokens.
    """
    reqs = sorted(requests, key=lambda r: (r.arrival_step, r.request_id))
    config = EngineConfig(policy=policy, kv_budget_tokens=kv_budget_tokens, block_size=block_size,   # checks them
                          max_seq_len=max_seq_len, max_num_batched_tokens=max_num_batched_tokens,
                          preemption_mode=preemption_mode, swap_space_tokens=swap_space_tokens,
                          enable_prefix_caching=enable_prefix_caching, keep_history=False)
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of {ALLOCATORS}")
    if policy == "paged":
        if kv_budget_tokens < block_size:
            raise ValueError(f"kv_budget_tokens={kv_budget_tokens} is smaller than one block of {block_size} slots")
        check_whole("watermark_blocks", watermark_blocks)
    if not reqs:
        raise ValueError("no requests to simulate")
    if len({r.request_id for r in reqs}) != len(reqs):
        raise ValueError("request ids are not unique")
    for r in reqs:
        if r.final_len > max_seq_len:
            raise ValueError(f"request {r.request_id}: {r.final_len} tokens exceed max_seq_len={max_seq_len}")
        if r.prompt_len == 0:
            raise ValueError(f"request {r.request_id} has an empty prompt")

    manager: BlockManager | None = None
    arena: ContiguousArena | None = None
    memory: BlockManager | ContiguousMemory
    reservations: dict[int, int] = {}    # by the engine's request id: the index in reqs
    if policy == "paged":
        swap = None
        if preemption_mode == "swap":
            swap = SwapSpace(max(1, (swap_space_tokens or kv_budget_tokens) // block_size), block_size)
        manager = memory = block_manager(kv_budget_tokens // block_size, block_size, max_seq_len,
                                         enable_prefix_caching=enable_prefix_caching,
                                         watermark_blocks=watermark_blocks, swap=swap)
        capacity = manager.pool.capacity_tokens
        too_big = [r.request_id for r in reqs if blocks_needed(r.final_len, block_size) > manager.pool.num_blocks]
    else:
        arena = make_arena(kv_budget_tokens, allocator)
        reservations = {i: reservation_size(r.prompt_len, r.output_len, max_seq_len, reserve) for i, r in enumerate(reqs)}
        memory = ContiguousMemory(arena, lambda seq: reservations[seq.seq_id])
        capacity = kv_budget_tokens
        too_big = [reqs[i].request_id for i, size in reservations.items() if size > arena.max_allocation]
    if too_big:
        raise ValueError(f"requests {too_big} can never fit in a budget of {kv_budget_tokens} tokens")

    result = SimResult(policy, block_size if manager else None, reserve if arena else None, capacity,
                       prefix_caching=enable_prefix_caching, allocator=allocator if arena else None,
                       preemption_mode=preemption_mode)
    records = [RequestRecord(r.request_id, r.arrival_step) for r in reqs]   # the engine numbers them 0, 1, ...
    result.requests = records
    snapshots = set(snapshot_steps)
    clock = [0]

    def measure(_step: ScheduledStep | None = None) -> None:
        """Where the slots are while the step runs: before its finished requests give memory back."""
        running = list(engine.scheduler.running)
        waiting = engine.scheduler.waiting
        step = clock[0]
        result.steps.append(_record(step, running, len(waiting), waiting[0] if waiting else None, memory, arena,
                                    reservations))
        if arena is not None and step in snapshots:
            by_id = {s.seq_id: s for s in running}
            result.arena_snapshots[step] = [
                ArenaSlice(reqs[e.owner].request_id, e.start, e.size, by_id[e.owner].num_computed_tokens,
                           _kv_len(by_id[e.owner])) for e in arena.extents]

    engine = LLMEngine(StandInRunner(vocab_size, measure), config=config, memory=memory)
    pending = deque(enumerate(reqs))
    for step in range(max_steps):
        clock[0] = step
        while pending and pending[0][1].arrival_step <= step:
            _, r = pending.popleft()
            ids = prompt_token_ids(r, vocab_size, prompt_seed) if enable_prefix_caching else [0] * r.prompt_len
            engine.add_request(ids, SamplingParams(max_tokens=r.output_len, ignore_eos=True), arrival_time=step)
        finished = engine.step()
        decided = engine.last_step
        if decided.failed:   # cannot happen: every request was checked to fit the budget alone
            raise RuntimeError(f"requests {[reqs[s.seq_id].request_id for s in decided.failed]} failed to fit")
        if decided.is_empty:   # the runner did not run: nothing held memory that the step gave back
            measure()
        for seq in decided.admitted:
            if records[seq.seq_id].admit_step is None:
                records[seq.seq_id].admit_step = step
        for seq in decided.preempted:
            records[seq.seq_id].preemptions += 1
        for out in finished:
            record = records[out.request_id]
            record.finish_step = step
            if record.admit_step is None:   # asked for no tokens: done on arrival
                record.admit_step = step
        if not (pending or engine.has_unfinished):
            result.preemptions = engine.scheduler.num_preemptions
            result.tokens = dataclasses.replace(engine.scheduler.counts)
            if manager is not None and manager.prefix_cache is not None:
                result.evictions = manager.prefix_cache.num_evictions
            if memory.swap is not None:
                result.swapped_blocks = memory.swap.blocks_out
            return result
    raise RuntimeError(f"simulation did not finish within {max_steps} steps")


def _kv_len(seq: SeqRecord) -> int:
    """Slots a request will ever fill: its prompt and every output token but the last."""
    return seq.num_prompt_tokens + seq.params.max_tokens - 1


def _record(step: int, running: list[SeqRecord], num_waiting: int, head: SeqRecord | None,
            memory: BlockManager | ContiguousMemory, arena: ContiguousArena | None,
            reservations: dict[int, int]) -> StepRecord:
    """Where the budget's slots are after one step, read from the scheduler's memory (a shared block once)."""
    usage = memory.usage()
    if arena is None:   # paged: the only waste is the empty tail of last blocks
        internal = usage.held_slots - usage.stored_tokens
        return StepRecord(step, len(running), num_waiting, usage.stored_tokens, 0, internal, 0,
                          usage.capacity - usage.held_slots)
    kv_len = sum(map(_kv_len, running))
    over = kv_len - usage.stored_tokens
    internal = sum(arena.extent(s.seq_id).size for s in running) - kv_len  # a buddy block's rounding too
    external = arena.stranded(reservations[head.seq_id]) if head is not None else 0
    return StepRecord(step, len(running), num_waiting, usage.stored_tokens, over, internal, external,
                      usage.capacity - arena.reserved - external)


@dataclass(frozen=True)
class PreemptionOverhead:
    """One block size of :func:`preemption_overhead`: what preemption moved or recomputed, and its modelled time."""

    block_size: int
    preemptions: int              # recompute run
    recomputed_tokens: int        # measured by the recompute run
    swaps: int                    # swap run
    swapped_blocks: int           # measured by the swap run, each way
    recompute_s: float            # modelled: recomputed tokens at the prefill throughput
    swap_s: float                 # modelled: a copy per block per layer for K and V, out and in


def preemption_overhead(requests: Iterable[Request], block_sizes: Iterable[int], kv_budget_tokens: int, *,
                        num_params: float, num_layers: int, kv_bytes_per_token: int, device: Device = A100_PCIE,
                        **sim: object) -> list[PreemptionOverhead]:
    """Recompute against swap on one workload, by block size: the paper's Fig. 19(a) with this book's scheduler.

    At each block size the workload is simulated twice, preempting by recompute and by swap.
    The simulations *count* (tokens recomputed, blocks swapped); the cost model of
    :mod:`pagedkv_edu.core.swap` turns the counts into seconds on ``device``, for a model
    of ``num_params`` parameters (``swap.OPT_13B`` is the paper's).
    """
    reqs = list(requests)
    out = []
    for size in block_sizes:
        recompute = simulate(reqs, "paged", kv_budget_tokens, block_size=size, **sim)   # type: ignore[arg-type]
        swap = simulate(reqs, "paged", kv_budget_tokens, block_size=size, preemption_mode="swap",
                        **sim)   # type: ignore[arg-type]
        copies = 2 * 2 * num_layers * swap.swapped_blocks          # K and V of every layer, out and in
        moved = 2 * swap.swapped_blocks * size * kv_bytes_per_token
        out.append(PreemptionOverhead(
            size, recompute.preemptions, recompute.recomputed_tokens, swap.preemptions, swap.swapped_blocks,
            2 * num_params * recompute.recomputed_tokens / device.achieved_flops,
            copies * device.copy_latency_s + moved / device.host_bandwidth))
    return out
