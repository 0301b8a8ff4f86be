"""A memory-only simulation of serving a workload: contiguous reservations against paging.

No model runs here: each request is a prompt length and an output length, and each step of
the simulation is one iteration of a continuous-batching engine (Orca-style iteration-level
scheduling, as in chapter 6). What the simulation measures is where every KV slot of a fixed
budget goes, step by step:

* ``used``: slots holding a token's K/V;
* ``over_reserved``: reserved for tokens the request will produce, but has not yet (contiguous);
* ``internal``: allocated and never going to hold a token (the reservation's tail beyond the
  final length for contiguous; the empty slots of each sequence's last block for paged);
* ``external``: free slots in holes too small for the next waiting request (contiguous);
* ``free``: the rest, free and usable.

The scheduler is chapter 6's (:mod:`pagedkv_edu.scheduler`): first come, first served with
head-of-line blocking. A request finishes by the engine's rule: in the step that samples its
last output token, whose K/V is never computed, so it holds at most ``prompt + output - 1``
tokens; a request asking for no output finishes on arrival, holding nothing. A paged request is admitted when its prompt's blocks fit; when a
decode step finds no free block, the most recently admitted request is preempted by
recompute (its blocks are freed and it goes back to the front of the queue keeping its
generated tokens), as in vLLM and nano-vllm.

With ``enable_prefix_caching`` (chapter 8) every prompt gets the workload's token ids
(:func:`~pagedkv_edu.workload.prompt_token_ids`: the shared system prompt is the same ids in
every request), the block manager looks each admission up in its prefix cache, and each step
reports the running sequences computed, as the engine does after its forward pass. The
result then also counts prefix hits and the prefill tokens really computed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Iterable

from .block_manager import BlockManager
from .block_table import blocks_needed
from .checks import check_whole
from .contiguous import ALLOCATORS, ContiguousArena, ContiguousMemory, make_arena, reservation_size
from .engine.request import Request as SeqRecord
from .engine.sampling import SamplingParams
from .scheduler import POLICIES, PREEMPTION_MODES, ScheduledStep, Scheduler
from .swap import Hardware, SwapSpace
from .workload import MAX_SEQ_LEN, Request, prompt_token_ids

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
    prompt_tokens: int = 0          # every prompt once, at its first admission
    prefill_tokens: int = 0         # tokens the prefills computed, recomputation after preemption included
    hit_tokens: int = 0             # prompt tokens found in the prefix cache at first admission
    resumed_hit_tokens: int = 0     # a preempted request finding its own blocks again (not sharing)
    evictions: int = 0              # cached blocks reused for other content
    allocator: str | None = None    # the contiguous arena's allocator (first-fit or buddy)
    preemption_mode: str = "recompute"
    swapped_blocks: int = 0         # blocks copied to host memory (each comes back: as many copied in)

    def _sum(self, name: str) -> int:
        return sum(getattr(s, name) for s in self.steps)

    @property
    def utilisation(self) -> float:
        """Of the slots held by requests (or stranded between them), the share holding tokens.

        Summed over all steps. Free, usable slots do not count: an idle arena is not a
        wasteful one. This is the paper's measure (20.4-38.2% for the systems before vLLM).
        """
        held = sum(self._sum(k) for k in ("used", *WASTE_KINDS))
        return self._sum("used") / held if held else 1.0

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
        """Mean running requests over the steps when some request waited for memory.

        How many requests the budget really held while there was demand for more: the fair
        "how many fit" figure, unaffected by the tail of the run when the queue is empty.
        """
        busy = [s.running for s in self.steps if s.waiting]
        return sum(busy) / len(busy) if busy else float("nan")

    @property
    def total_steps(self) -> int:
        return len(self.steps)

    @property
    def prefix_hit_rate(self) -> float:
        """Share of prompt tokens the prefix cache supplied, each prompt counted once (vLLM's measure).

        Hits of a preempted request on its own blocks are in ``resumed_hit_tokens`` instead,
        so that they do not pass for sharing between requests.
        """
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def recomputed_tokens(self) -> int:
        """Prefill tokens computed again after preemptions (prefill less the prompts' own, less prefix hits)."""
        return self.prefill_tokens - (self.prompt_tokens - self.hit_tokens)

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
        cache = {"prefix_caching": {"hit_rate": round(self.prefix_hit_rate, 4), "hit_tokens": self.hit_tokens,
                                    "prompt_tokens": self.prompt_tokens, "prefill_tokens": self.prefill_tokens,
                                    "resumed_hit_tokens": self.resumed_hit_tokens, "evictions": self.evictions}}
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
) -> SimResult:
    """Serve ``requests`` on a KV budget of ``kv_budget_tokens`` slots under ``policy``.

    ``reserve`` (contiguous only) picks the reservation rule: ``max``, ``pow2`` or ``oracle``, and
    ``allocator`` (contiguous only) the arena that places it: ``first-fit`` or the paper's ``buddy``.
    ``watermark_blocks`` (paged only) keeps that many blocks free at admission so running
    requests can grow without immediate preemption. ``enable_prefix_caching`` (paged only)
    gives the prompts token ids drawn with ``vocab_size`` and ``prompt_seed`` and shares
    cached blocks between them. ``snapshot_steps`` (contiguous only) records the arena's
    layout at those steps, for drawing it as a strip with its holes. ``max_num_batched_tokens``
    caps the tokens computed per step (chunked prefill, as the engine does); the default, no
    cap, prefills every admitted prompt whole. ``preemption_mode="swap"`` (paged only) swaps
    victims out to ``swap_space_tokens`` host slots (default: as many as the budget) instead of
    recomputing them; ``swapped_blocks`` counts the blocks moved each way.

    The loop is the engine's: the same :class:`~pagedkv_edu.scheduler.Scheduler` owns the
    memory and decides each step, and a :class:`StandInRunner` takes the model's place.
    """
    reqs = sorted(requests, key=lambda r: (r.arrival_step, r.request_id))
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; choose one of {ALLOCATORS}")
    if enable_prefix_caching and policy != "paged":
        raise ValueError(f"prefix caching shares blocks, so it needs policy='paged', not {policy!r}")
    check_whole("kv_budget_tokens", kv_budget_tokens, 1)
    if preemption_mode not in PREEMPTION_MODES:
        raise ValueError(f"unknown preemption_mode {preemption_mode!r}; choose one of {PREEMPTION_MODES}")
    if preemption_mode == "swap" and policy != "paged":
        raise ValueError(f"swapping moves blocks, so it needs policy='paged', not {policy!r}")
    if policy == "paged":
        check_whole("block_size", block_size, 1)
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
    reservations: dict[int, int] = {}
    if policy == "paged":
        swap = None
        if preemption_mode == "swap":
            swap = SwapSpace(max(1, (swap_space_tokens or kv_budget_tokens) // block_size), block_size)
        manager = memory = BlockManager(kv_budget_tokens // block_size, block_size, max_seq_len,
                                        enable_prefix_caching=enable_prefix_caching,
                                        watermark_blocks=watermark_blocks, swap=swap)
        capacity = manager.pool.capacity_tokens
        too_big = [r.request_id for r in reqs if blocks_needed(r.final_len, block_size) > manager.pool.num_blocks]
    else:
        arena = make_arena(kv_budget_tokens, allocator)
        reservations = {r.request_id: reservation_size(r.prompt_len, r.output_len, max_seq_len, reserve) for r in reqs}
        memory = ContiguousMemory(arena, lambda seq_id, _num_tokens: reservations[seq_id])
        capacity = kv_budget_tokens
        too_big = [i for i, size in reservations.items() if size > arena.max_allocation]
    if too_big:
        raise ValueError(f"requests {too_big} can never fit in a budget of {kv_budget_tokens} tokens")

    result = SimResult(policy, block_size if manager else None, reserve if arena else None, capacity,
                       prefix_caching=enable_prefix_caching, allocator=allocator if arena else None,
                       preemption_mode=preemption_mode)
    records = {r.request_id: RequestRecord(r.request_id, r.arrival_step) for r in reqs}
    result.requests = list(records.values())
    scheduler = Scheduler(memory, max_num_batched_tokens=max_num_batched_tokens, preemption_mode=preemption_mode)
    runner = StandInRunner(vocab_size)
    pending = deque(SeqRecord(r.request_id, prompt_token_ids(r, vocab_size, prompt_seed)
                              if enable_prefix_caching else None, SamplingParams(max_tokens=r.output_len),
                              arrival_time=r.arrival_step, num_prompt_tokens=r.prompt_len)
                    for r in reqs)
    snapshots = set(snapshot_steps)

    for step in range(max_steps):
        while pending and pending[0].arrival_time <= step:
            seq = pending.popleft()
            if seq.params.max_tokens == 0:   # done before it needs memory, as in the engine
                records[seq.seq_id].admit_step = records[seq.seq_id].finish_step = step
                continue
            scheduler.add(seq)
        decided = scheduler.schedule()
        for seq in decided.admitted:
            if records[seq.seq_id].admit_step is None:
                records[seq.seq_id].admit_step = step
        for seq in decided.preempted:
            records[seq.seq_id].preemptions += 1
        if decided.failed:   # cannot happen: every request was checked to fit the budget alone
            raise RuntimeError(f"requests {[s.seq_id for s in decided.failed]} failed to fit the memory")
        for seq, token in zip(*runner.execute(decided)):
            seq.output_token_ids.append(token)
        result.preemptions = scheduler.num_preemptions

        running = list(scheduler.running)
        head = scheduler.waiting[0] if scheduler.waiting else None
        result.steps.append(_record(step, running, len(scheduler.waiting), head, memory, arena, reservations))
        if arena is not None and step in snapshots:
            by_id = {s.seq_id: s for s in running}
            result.arena_snapshots[step] = [
                ArenaSlice(e.owner, e.start, e.size, by_id[e.owner].num_computed_tokens, _kv_len(by_id[e.owner]))
                for e in arena.extents
            ]

        for seq in [s for s in running if len(s.output_token_ids) == s.params.max_tokens]:   # sampled its last
            scheduler.finish(seq)
            records[seq.seq_id].finish_step = step

        if not (pending or scheduler.has_unfinished):
            counts = scheduler.counts
            result.prompt_tokens, result.hit_tokens = counts.prompt_tokens, counts.prefix_hit_tokens
            result.resumed_hit_tokens, result.prefill_tokens = counts.resumed_hit_tokens, counts.prefill_tokens
            if manager is not None and manager.prefix_cache is not None:
                result.evictions = manager.prefix_cache.num_evictions
            if memory.swap is not None:
                result.swapped_blocks = memory.swap.blocks_out
            return result
    raise RuntimeError(f"simulation did not finish within {max_steps} steps")


class StandInRunner:
    """The model runner of a simulation: no model, one stand-in token per sampling sequence.

    The engine's runner turns a scheduled step into a forward pass and logits; memory does not
    depend on what the tokens are, so this one returns, for every sequence whose step reached
    its last token, the id ``vocab_size + seq_id``: outside the vocabulary, so a generated
    token is never shared with another request through the prefix cache.
    """

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def execute(self, step: ScheduledStep) -> tuple[list[SeqRecord], list[int]]:
        sampling = [s.seq for s in step.scheduled if s.samples]
        return sampling, [self.vocab_size + seq.seq_id for seq in sampling]


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
    over = sum(map(_kv_len, running)) - usage.stored_tokens
    internal = sum(arena.extent(s.seq_id).size - _kv_len(s) for s in running)  # a buddy block's rounding too
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
                        num_params: float, num_layers: int, kv_bytes_per_token: int, hw: Hardware = Hardware(),
                        **sim: object) -> list[PreemptionOverhead]:
    """Recompute against swap on one workload, by block size: the paper's Fig. 19(a) with this book's scheduler.

    At each block size the workload is simulated twice, preempting by recompute and by swap.
    The simulations *count* (tokens recomputed, blocks swapped); the cost model of
    :mod:`pagedkv_edu.swap` turns the counts into seconds on the hardware ``hw``, for a model
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
            2 * num_params * recompute.recomputed_tokens / hw.prefill_flops_per_s,
            copies * hw.copy_latency_s + moved / hw.pcie_bytes_per_s))
    return out
