"""Routing requests across replicas, each with its own prefix cache (chapter 11).

Each :class:`Replica` is a block manager with prefix caching, a FIFO queue and one prefill at a
time; the router applies one of :data:`POLICIES` on arrival (blind, consistent hash, prefix
affinity, or SGLang-style cache-aware: :func:`hybrid_choice`, whose weak match goes to the least
loaded replica, and :func:`smallest_tree_choice`, whose weak match goes to the replica with the
smallest :class:`RouterTree`), and :class:`CostModel` gives each request's time to first token from
the book's one cost model (:mod:`.decode_cost`). A replica's load is counted two ways: outstanding
requests (what SGLang's router counts) and queued prefill tokens (what the cost model charges a new
request for). :func:`over_seeds` repeats a comparison on fresh draws of a workload, and
:class:`Spread` says how far a figure moves between them.
"""

from __future__ import annotations

import bisect
import gc
import hashlib
import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..core.block_manager import BlockManager
from ..core.block_table import blocks_needed
from ..core.prefix_cache import BlockHash, BlockHasher
from ..core.request import Request as Record
from ..specs import ModelSpec, get_spec, hit_rate
from ..checks import check_whole
from .decode_cost import H200, Device, StepCost
from .routing_workloads import TimedRequest

MAX_REPLICAS = 64


# --- the cost model ------------------------------------------------------------------------------
DECODE_BATCH, DECODE_CONTEXT = 16, 1024
"""The decode step each output token is charged: 16 sequences of 1,024 tokens (the step :func:`cost_table` prints)."""


@dataclass(frozen=True)
class CostModel:
    """Time to first token = queueing + the prefill of the prompt's uncached tokens; decoding holds the blocks.

    A replica prefills one request at a time, in arrival order (a long prefill is compute-bound, so
    two at once take about as long as one after the other; a short one, which an engine would batch
    with others to share the weight read, pays that read alone here). Decoding is batched beside it
    and delays no prefill; it only holds the request's blocks for ``output tokens × decode_ms_per_token``.

    With a ``step`` (:meth:`for_gpu`, the default of :func:`route`) a prefill of ``n`` uncached
    tokens after ``h`` cached ones takes ``step.prefill_ms(n, cached=h)``: the longer of its bytes
    (the weights once, the cached prefix's K/V read, its own written) and its FLOPs (the matmuls,
    and attention over the cached prefix too), so a hit saves compute but not all of it. Without
    one (:meth:`flat`) it takes ``n × prefill_ms_per_token``: round numbers for hand-worked traces.
    """

    decode_ms_per_token: float
    step: StepCost | None = None
    prefill_ms_per_token: float = 0.0

    def __post_init__(self) -> None:
        for name in ("prefill_ms_per_token", "decode_ms_per_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
                raise ValueError(f"{name} must be in [0, 1e6] ms, got {value!r}")
        if self.step is not None and not isinstance(self.step, StepCost):
            raise ValueError(f"step must be a StepCost or None, got {self.step!r}")
        if self.step is not None and self.prefill_ms_per_token:
            raise ValueError(f"give a step or a flat prefill_ms_per_token, not both (got {self.prefill_ms_per_token!r} "
                             f"beside a step of {self.step.spec.name})")

    @classmethod
    def for_gpu(cls, spec: ModelSpec | None = None, device: Device = H200, *, decode_batch: int = DECODE_BATCH,
                decode_context: int = DECODE_CONTEXT) -> CostModel:
        """``spec`` (default Llama-3.2-1B) on ``device``: prefills from :class:`StepCost`, and each output token a
        decode step of ``decode_batch`` sequences at ``decode_context`` tokens (a typical batch: its cost barely
        moves with the batch while the weights dominate the bytes)."""
        step = StepCost(spec or get_spec("llama-3.2-1b"), device)
        return cls(step.decode_ms(decode_batch, decode_context), step=step)

    @classmethod
    def flat(cls, prefill_ms_per_token: float, decode_ms_per_token: float) -> CostModel:
        """A fixed cost per prefill token and per decode step, whatever is cached: for traces worked by hand."""
        return cls(decode_ms_per_token, prefill_ms_per_token=prefill_ms_per_token)

    def prefill_ms(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """Milliseconds to prefill ``new_tokens`` of a prompt whose first ``cached_tokens`` the cache supplied."""
        check_whole("new_tokens", new_tokens, 1)
        check_whole("cached_tokens", cached_tokens)
        if self.step is None:
            return new_tokens * self.prefill_ms_per_token
        return self.step.prefill_ms(new_tokens, cached=cached_tokens)


GPU_COST = CostModel.for_gpu()
"""Llama-3.2-1B on an H200, the model and device of chapters 6 and 11: the default of :func:`route`."""


def offered_load(requests: Sequence[TimedRequest], num_replicas: int, cost: CostModel = GPU_COST) -> float:
    """ρ: the prefill work the requests bring per replica per unit of time, every prompt computed in full.

    The load a fleet with no cache would carry (over 1 its queues grow without bound); hits lower
    the work actually done, by as much as the router lets them.
    """
    check_whole("num_replicas", num_replicas, 1, MAX_REPLICAS)
    rate = _arrivals_per_ms(requests)
    return sum(cost.prefill_ms(r.prompt_len) for r in requests) / len(requests) * rate / num_replicas


def offered_memory(requests: Sequence[TimedRequest], num_replicas: int, num_blocks: int, block_size: int = 16,
                   cost: CostModel = GPU_COST) -> float:
    """The share of each replica's pool the requests would hold on average if none waited (Little's law).

    Arrivals per replica per ms × the blocks of a request × the ms it holds them (its prefill,
    every prompt computed in full, then its answer's decode steps), over ``num_blocks``. At 1 or
    more the requests must wait for each other's blocks: memory, not prefill, sets the queue.
    """
    check_whole("num_replicas", num_replicas, 1, MAX_REPLICAS)
    check_whole("num_blocks", num_blocks, 1, 1 << 21)
    check_whole("block_size", block_size, 1, 4096)
    rate = _arrivals_per_ms(requests)
    held = [blocks_needed(r.prompt_len + len(r.output), block_size)
            * (cost.prefill_ms(r.prompt_len) + len(r.output) * cost.decode_ms_per_token) for r in requests]
    return sum(held) / len(requests) * rate / num_replicas / num_blocks


def _arrivals_per_ms(requests: Sequence[TimedRequest]) -> float:
    """The arrival rate of a trace: its gaps over its span (n arrivals make n - 1 gaps)."""
    if len(requests) < 2:
        raise ValueError(f"an offered load needs at least two arrivals, got {len(requests)}")
    span = max(r.arrival_ms for r in requests) - min(r.arrival_ms for r in requests)
    if not span > 0:
        raise ValueError("an offered load needs arrivals spread over time; these all arrive at once")
    return (len(requests) - 1) / span


# --- one replica ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What happened to one request: where it went, what it found, and when."""

    request_id: int
    replica: int
    arrival_ms: float
    start_ms: float          # its prefill began
    first_token_ms: float    # its prefill ended
    finish_ms: float         # its last output token; its blocks return to the pool
    prompt_tokens: int
    hit_tokens: int          # found in the replica's prefix cache

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    @property
    def ttft_ms(self) -> float:
        return self.first_token_ms - self.arrival_ms

    @property
    def queue_ms(self) -> float:
        return self.start_ms - self.arrival_ms


class Replica:
    """One engine: a block pool with a prefix cache, a FIFO prefill queue, decodes beside it.

    :meth:`serve` admits requests in the order they are routed here. A request is admitted when
    the prefill before it has ended and its blocks (prompt and output) fit; if they do not, it
    waits for running requests to finish. At admission it takes the longest cached prefix of its
    prompt; its blocks are registered in the cache at once (chapter 8), the output's too, which
    only a chat's next turn will ever find.
    """

    def __init__(self, num_blocks: int, block_size: int, cost: CostModel) -> None:
        self.manager = BlockManager(num_blocks, block_size, enable_prefix_caching=True)
        self.cost = cost
        self.busy_until = 0.0                          # the end of the last prefill admitted
        self.outcomes: list[Outcome] = []
        self._live: list[tuple[float, int, Record]] = []   # (finish_ms, request_id, its record): holding blocks
        self._groups: dict[str, tuple[int, ...]] = {}  # each group seen: its first block and one token
        self._finishes: list[float] = []               # every finish_ms, sorted: load() by bisection
        self._first_tokens: list[float] = []           # first_token_ms in admission order: never decreasing (FIFO)
        self._computed: list[int] = [0]                # uncached prompt tokens of the first k admitted, k = 0, 1, ...

    def cached_tokens(self, prompt: Sequence[int]) -> int:
        """Prompt tokens this replica's cache would give a request admitted next (its queue ahead of it included)."""
        return self.manager.lookup(Record(None, list(prompt))).num_tokens

    def load(self, now_ms: float) -> int:
        """Requests routed here and not finished at ``now_ms``: waiting, prefilling or decoding."""
        return len(self._finishes) - bisect.bisect_right(self._finishes, now_ms)

    def queued_prefill_tokens(self, now_ms: float) -> int:
        """Uncached prompt tokens of the requests here whose prefill has not ended at ``now_ms`` (waiting or
        prefilling): the work a request routed here now queues behind, in the cost model's own unit."""
        done = bisect.bisect_right(self._first_tokens, now_ms)
        return self._computed[-1] - self._computed[done]

    def queue(self, now_ms: float) -> tuple[int, int, int]:
        """(waiting, prefilling, decoding) at ``now_ms``."""
        waiting = sum(1 for o in self.outcomes if o.start_ms > now_ms)
        prefilling = sum(1 for o in self.outcomes if o.start_ms <= now_ms < o.first_token_ms)
        decoding = sum(1 for o in self.outcomes if o.first_token_ms <= now_ms < o.finish_ms)
        return waiting, prefilling, decoding

    def cached_groups(self) -> list[str]:
        """The groups (tenants, chats, the system prompt) whose first block is still in the cache."""
        return [g for g, head in self._groups.items() if self.cached_tokens(head) > 0]

    def serve(self, request: TimedRequest, index: int, record: Record | None = None) -> Outcome:
        """Admit ``request`` after everything routed here before it; ``index`` is this replica's number.

        ``record``: the request's fresh record, if the router already made one for its lookups, so
        that its prompt is hashed once for the whole fleet rather than once per replica asked.
        """
        manager = self.manager
        _check_fits(request, manager.pool.num_blocks, manager.block_size)
        rid = request.request_id
        seq = Record(rid, list(request.prompt)) if record is None else record
        if seq.num_tokens != request.prompt_len or seq.request_id != rid:
            raise ValueError(f"the record of request {rid} must be fresh: its prompt only, with its id")
        start = max(request.arrival_ms, self.busy_until)
        self._release(start)
        need = blocks_needed(request.prompt_len + len(request.output), manager.block_size)    # at most, hits aside
        while need > manager.pool.num_free and self._blocks_for(request, seq) > manager.pool.num_free:
            # wait for running requests to finish
            start = max(start, self._live[0][0])
            self._release(start)
        hit = manager.lookup(seq)
        granted = manager.admit(seq, request.prompt_len - hit.num_tokens, hit)
        assert granted is not None, "counted above"
        seq.num_computed_tokens = request.prompt_len
        seq.output_token_ids += request.output     # its reply: a chat's next turn may find it
        manager.grow(seq, len(request.output))
        seq.num_computed_tokens = seq.num_tokens
        cached = hit.num_tokens
        first = start + self.cost.prefill_ms(request.prompt_len - cached, cached)
        finish = first + len(request.output) * self.cost.decode_ms_per_token
        self.busy_until = first
        heapq.heappush(self._live, (finish, rid, seq))
        bisect.insort(self._finishes, finish)
        self._first_tokens.append(first)
        self._computed.append(self._computed[-1] + request.prompt_len - cached)
        self._groups.setdefault(request.group, request.prompt[:manager.block_size + 1])
        outcome = Outcome(rid, index, request.arrival_ms, start, first, finish, request.prompt_len, cached)
        self.outcomes.append(outcome)
        return outcome

    def _blocks_for(self, request: TimedRequest, seq: Record) -> int:
        """Free blocks the request takes for its prompt and reply: new ones, and cached free ones it revives."""
        manager, size = self.manager, self.manager.block_size
        hit = manager.lookup(seq)
        revived = sum(1 for b in hit.block_ids if manager.pool.ref_counts[b] == 0)
        return blocks_needed(request.prompt_len + len(request.output), size) - len(hit.block_ids) + revived

    def _release(self, now_ms: float) -> None:
        while self._live and self._live[0][0] <= now_ms:
            self.manager.release(heapq.heappop(self._live)[2])


def _check_fits(request: TimedRequest, num_blocks: int, block_size: int) -> None:
    """Refuse a request one replica can never hold (or with an empty prompt), before any state changes."""
    if request.prompt_len == 0:
        raise ValueError(f"request {request.request_id} has an empty prompt")
    need = blocks_needed(request.prompt_len + len(request.output), block_size)
    if need > num_blocks:
        raise ValueError(f"request {request.request_id} ({request.prompt_len} + {len(request.output)} tokens) does "
                         f"not fit a replica of {num_blocks} blocks of {block_size}: they need {need} blocks")


# --- what a policy sees, and the policies --------------------------------------------------------
class Fleet:
    """The replicas as a router sees them when one request arrives: loads and cached prefixes.

    The last loads and matches asked for are kept (:attr:`seen`), so a run can record what
    each decision was based on.
    """

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.replicas = list(replicas)
        self.now_ms = 0.0
        self.seen: dict[str, list[int]] = {}
        self._arrival: tuple[tuple[int, ...], Record] | None = None    # the arriving prompt and its one record

    def __len__(self) -> int:
        return len(self.replicas)

    def arrive(self, request: TimedRequest) -> Record:
        """Set the clock to ``request``'s arrival and make the record its lookups and its admission share.

        The record starts with the hash chain of its prompt and reply (:func:`_chain`), the same on
        every replica and under every policy, so routing one workload again does not hash it again.
        """
        hasher = self.replicas[0].manager.prefix_cache.hasher     # type: ignore[union-attr]
        record = Record(request.request_id, list(request.prompt), hasher=hasher,
                        _hashes=list(_chain(request.prompt + request.output, hasher)))
        self.now_ms, self.seen, self._arrival = request.arrival_ms, {}, (request.prompt, record)
        return record

    def loads(self) -> list[int]:
        """Each replica's outstanding requests (waiting, prefilling or decoding): what SGLang's router counts."""
        self.seen["loads"] = [r.load(self.now_ms) for r in self.replicas]
        return self.seen["loads"]

    def prefill_loads(self) -> list[int]:
        """Each replica's queued prefill tokens (:meth:`Replica.queued_prefill_tokens`): what a new request waits for."""
        self.seen["prefill_loads"] = [r.queued_prefill_tokens(self.now_ms) for r in self.replicas]
        return self.seen["prefill_loads"]

    def matches(self, prompt: Sequence[int]) -> list[int]:
        """Tokens of ``prompt`` each replica's cache holds (what the request would find there)."""
        if self._arrival is not None and prompt is self._arrival[0]:
            record = self._arrival[1]                 # the arriving request: hash its prompt once
        else:
            record = Record(None, list(prompt))
        self.seen["matches"] = [r.manager.lookup(record).num_tokens for r in self.replicas]
        return self.seen["matches"]


@lru_cache(maxsize=2048)
def _chain(tokens: tuple[int, ...], hasher: BlockHasher) -> tuple[BlockHash, ...]:
    """The hash of every full block of ``tokens``: a function of the tokens alone, so kept for the next run
    of the same workload (a comparison routes each draw once per policy)."""
    return tuple(hasher.chain(tokens))


Policy = Callable[[TimedRequest, Fleet], int]
"""A routing policy: the request and the fleet in, a replica's index out."""


def least_loaded(loads: Sequence[int]) -> int:
    """The replica with the fewest outstanding requests (the first of equals)."""
    return min(range(len(loads)), key=loads.__getitem__)


@dataclass(frozen=True)
class HybridThresholds:
    """The hybrid's three knobs, named as in SGLang's router.

    The router's command line defaults to ``--cache-threshold 0.3 --balance-abs-threshold 64
    --balance-rel-threshold 1.5`` (sgl-router's ``router_args.py``; the same in the gateway's
    ``main.rs``); the Rust ``CacheAwareConfig::default()``, used when the policy is built without
    the command line, has 0.5, 32 and 1.1. This chapter takes the command line's 0.3 and 1.5;
    64 outstanding requests is meant for a large GPU, more than a replica here ever holds at once, so
    the absolute threshold here defaults to 8. ``abs_threshold_tokens`` is the absolute threshold when
    the load is counted in queued prefill tokens (:func:`prefill_hybrid_choice`): 2,048 tokens, about
    10 ms of Llama-3.2-1B prefill on an H200, two to three long prompts ahead.
    """

    cache_threshold: float = 0.3
    abs_threshold: int = 8
    rel_threshold: float = 1.5
    abs_threshold_tokens: int = 2048

    def __post_init__(self) -> None:
        if not 0 <= self.cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold!r}")
        check_whole("abs_threshold", self.abs_threshold, 0, 10**9)
        check_whole("abs_threshold_tokens", self.abs_threshold_tokens, 0, 10**12)
        if not 1 <= self.rel_threshold <= 1e6:
            raise ValueError(f"rel_threshold must be in [1, 1e6], got {self.rel_threshold!r}")


def imbalanced(loads: Sequence[int], abs_threshold: int = 8, rel_threshold: float = 1.5) -> bool:
    """SGLang's imbalance test over the whole fleet: ``max - min > abs_threshold`` *and* ``max > rel_threshold × min``."""
    high, low = max(loads), min(loads)
    return high - low > abs_threshold and high > rel_threshold * low


def hybrid_choice(loads: Sequence[int], matches: Sequence[int], prompt_len: int, cache_threshold: float = 0.3,
                  abs_threshold: int = 8, rel_threshold: float = 1.5) -> int:
    """SGLang's cache-aware decision with the **least-load** fallback, over ``loads`` and ``matches`` (cached tokens).

    Imbalanced, when ``max - min > abs_threshold`` *and* ``max > rel_threshold × min``: the least
    loaded. Otherwise the longest match (of equal ones, the less loaded), if ``match / prompt_len >
    cache_threshold``; else the least loaded. This is the rule of SGLang's model gateway after
    sglang PR #14650 ("pick min load instead of min tenant size", December 2025), as read in
    smg-project/smg at 73da68c (``model_gateway/src/policies/cache_aware.rs``). Before it, a weak
    match went to the replica with the smallest tree: :func:`smallest_tree_choice`.
    """
    if imbalanced(loads, abs_threshold, rel_threshold):
        return least_loaded(loads)
    best = min(range(len(matches)), key=lambda r: (-matches[r], loads[r]))     # equal matches: the less loaded
    if matches[best] / prompt_len > cache_threshold:
        return best
    return least_loaded(loads)


def smallest_tree_choice(loads: Sequence[int], matches: Sequence[int], prompt_len: int, tree_sizes: Sequence[int],
                         cache_threshold: float = 0.3, abs_threshold: int = 8, rel_threshold: float = 1.5) -> int:
    """sgl-router's cache-aware decision with the **smallest-tree** fallback (the rule before PR #14650).

    As :func:`hybrid_choice`, except that a match of at most ``cache_threshold`` of the prompt goes
    to the replica whose share of the router's tree (``tree_sizes``, tokens) is smallest, the first
    of equals, whatever its load: ``tree.get_smallest_tenant()`` in sgl-router's
    ``src/policies/cache_aware.rs`` (sgl-project/sglang at 026f853). Only the fleet-wide imbalance
    test looks at loads.
    """
    if imbalanced(loads, abs_threshold, rel_threshold):
        return least_loaded(loads)
    best = min(range(len(matches)), key=lambda r: (-matches[r], loads[r]))
    if matches[best] / prompt_len > cache_threshold:
        return best
    return min(range(len(tree_sizes)), key=tree_sizes.__getitem__)


def prefill_hybrid_choice(prefill_loads: Sequence[int], loads: Sequence[int], matches: Sequence[int], prompt_len: int,
                          cache_threshold: float = 0.3, abs_threshold_tokens: int = 2048,
                          rel_threshold: float = 1.5) -> int:
    """:func:`hybrid_choice` with the load counted as **queued prefill tokens** (``prefill_loads``), not requests.

    The same three steps, with ``abs_threshold_tokens`` in tokens. A replica with no prefill queued
    reads 0 however many requests it is decoding, so equal prefill loads (common: every idle
    replica is at 0) go to the one with fewer outstanding requests (``loads``), not to the first.
    """
    order = range(len(matches))

    def lighter(r: int) -> tuple[int, int]:
        return prefill_loads[r], loads[r]

    if imbalanced(prefill_loads, abs_threshold_tokens, rel_threshold):
        return min(order, key=lighter)
    best = min(order, key=lambda r: (-matches[r], *lighter(r)))
    if matches[best] / prompt_len > cache_threshold:
        return best
    return min(order, key=lighter)


def fallback_counts(decisions: Sequence[dict[str, Any]], limits: HybridThresholds = HybridThresholds(),
                    signal: str = "loads") -> tuple[int, int]:
    """Of a run's decisions (``RoutingResult.decisions``): how many the weak-match fallback made (balanced loads,
    best match at most ``cache_threshold`` of the prompt), and how many the fleet-wide imbalance test made.

    ``signal``: the load the policy balanced, ``"loads"`` (outstanding requests, against ``abs_threshold``) or
    ``"prefill_loads"`` (queued prefill tokens, against ``abs_threshold_tokens``).
    """
    gaps = {"loads": limits.abs_threshold, "prefill_loads": limits.abs_threshold_tokens}
    if signal not in gaps:
        raise ValueError(f"signal must be one of {', '.join(gaps)}, got {signal!r}")
    guard = [imbalanced(d[signal], gaps[signal], limits.rel_threshold) for d in decisions]
    weak = sum(not g and max(d["matches"]) / d["prompt_len"] <= limits.cache_threshold for g, d in zip(guard, decisions))
    return weak, sum(guard)


class RouterTree:
    """SGLang's router-side tree: **one** token trie for every replica, each node tagged with the replicas sent it.

    Every prompt routed to replica ``r`` is inserted with tag ``r`` (a set bit); ``sizes[r]``
    counts the tokens tagged ``r``, the distinct prompt prefixes the router sent there. That is the
    count sgl-router's ``Tree`` keeps per tenant (``tenant_char_count``, on characters) and
    ``get_smallest_tenant()`` reads. The tree remembers what was routed, not what the replica
    still caches; SGLang trims it by LRU every ``--eviction-interval`` seconds (120 on the command
    line), longer than any run in this chapter, so nothing is trimmed here.

    Stored as a radix tree, as SGLang's is: each node holds a run of tokens, split where two
    prompts part or one ends, so every token of a node carries the same tags.
    """

    def __init__(self, num_replicas: int) -> None:
        self._edge: list[tuple[int, ...]] = [()]           # per node: its run of tokens; node 0 is the root
        self._children: list[dict[int, int]] = [{}]         # per node: first token of a child's run -> the child
        self._tags: list[int] = [0]                          # per node: a bit per replica
        self.sizes = [0] * num_replicas

    def insert(self, prompt: Sequence[int], replica: int) -> None:
        prompt, bit, node, i = tuple(prompt), 1 << replica, 0, 0
        while i < len(prompt):
            child = self._children[node].get(prompt[i])
            if child is None:
                child = self._add(prompt[i:], 0, {})
                self._children[node][prompt[i]] = child
            shared = _shared_length(self._edge[child], prompt, i)
            if shared < len(self._edge[child]):
                self._split(child, shared)
            if not self._tags[child] & bit:
                self._tags[child] |= bit
                self.sizes[replica] += shared
            node, i = child, i + shared

    def tags(self, prompt: Sequence[int]) -> list[int]:
        """The replicas tagged on the node of ``prompt``'s longest prefix in the tree (ascending)."""
        prompt, node, i = tuple(prompt), 0, 0
        while i < len(prompt):
            child = self._children[node].get(prompt[i])
            if child is None:
                break
            node, shared = child, _shared_length(self._edge[child], prompt, i)
            if shared < len(self._edge[child]):
                break                                      # it ends inside this run, tagged as the run is
            i += shared
        return [r for r in range(len(self.sizes)) if self._tags[node] >> r & 1] if node else []

    def _add(self, edge: tuple[int, ...], tags: int, children: dict[int, int]) -> int:
        self._edge.append(edge)
        self._tags.append(tags)
        self._children.append(children)
        return len(self._edge) - 1

    def _split(self, node: int, at: int) -> None:
        """Cut ``node``'s run after ``at`` tokens; the rest becomes its one child, with its tags and children."""
        edge = self._edge[node]
        rest = self._add(edge[at:], self._tags[node], self._children[node])
        self._edge[node], self._children[node] = edge[:at], {edge[at]: rest}


def _shared_length(edge: tuple[int, ...], prompt: tuple[int, ...], start: int) -> int:
    """How many leading tokens of ``edge`` equal ``prompt[start:]``'s."""
    if prompt[start:start + len(edge)] == edge:
        return len(edge)
    n = 0
    for a, b in zip(edge, prompt[start:start + len(edge)]):
        if a != b:
            break
        n += 1
    return n


def _round_robin() -> Policy:
    count = itertools.count()
    return lambda request, fleet: next(count) % len(fleet)


def _least_loaded() -> Policy:
    return lambda request, fleet: least_loaded(fleet.loads())


def _least_prefill() -> Policy:
    """The fewest queued prefill tokens; of equals, the fewest outstanding requests."""
    def choose(request: TimedRequest, fleet: Fleet) -> int:
        tokens, loads = fleet.prefill_loads(), fleet.loads()
        return min(range(len(fleet)), key=lambda r: (tokens[r], loads[r]))
    return choose


def _hybrid_prefill(thresholds: HybridThresholds) -> Policy:
    def choose(request: TimedRequest, fleet: Fleet) -> int:
        tokens, loads, matches = fleet.prefill_loads(), fleet.loads(), fleet.matches(request.prompt)
        return prefill_hybrid_choice(tokens, loads, matches, request.prompt_len, thresholds.cache_threshold,
                                     thresholds.abs_threshold_tokens, thresholds.rel_threshold)
    choose.__name__ = "hybrid-prefill"
    return choose


def _power_of_two(seed: int) -> Policy:
    rng = np.random.default_rng([seed, 2])

    def choose(request: TimedRequest, fleet: Fleet) -> int:
        if len(fleet) == 1:
            return 0
        a, b = (int(i) for i in rng.choice(len(fleet), size=2, replace=False))
        loads = fleet.loads()
        return b if loads[b] < loads[a] else a
    return choose


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


def _consistent_hash(num_replicas: int, key_tokens: int, virtual_nodes: int = 64) -> Policy:
    """A hash ring with ``virtual_nodes`` points per replica, keyed by the prompt's first ``key_tokens`` tokens."""
    ring = sorted((_hash64(f"replica {r} point {v}".encode()), r)
                  for r in range(num_replicas) for v in range(virtual_nodes))
    points = [p for p, _ in ring]

    def choose(request: TimedRequest, fleet: Fleet) -> int:
        key = _hash64(np.asarray(request.prompt[:key_tokens], dtype="<i8").tobytes())
        return ring[bisect.bisect(points, key) % len(ring)][1]
    return choose


def _prefix_affinity() -> Policy:
    def choose(request: TimedRequest, fleet: Fleet) -> int:
        matches, loads = fleet.matches(request.prompt), fleet.loads()
        return min(range(len(fleet)), key=lambda r: (-matches[r], loads[r]))
    return choose


def _hybrid_smallest_tree(num_replicas: int, thresholds: HybridThresholds) -> Policy:
    tree = RouterTree(num_replicas)

    def choose(request: TimedRequest, fleet: Fleet) -> int:
        loads, matches = fleet.loads(), fleet.matches(request.prompt)
        fleet.seen["tree_sizes"] = list(tree.sizes)
        index = smallest_tree_choice(loads, matches, request.prompt_len, tree.sizes, thresholds.cache_threshold,
                                     thresholds.abs_threshold, thresholds.rel_threshold)
        tree.insert(request.prompt, index)        # SGLang inserts the prompt for whichever worker it picked
        return index
    choose.__name__ = "hybrid-smallest-tree"
    return choose


def hybrid_policy(choice: Callable[..., int] = hybrid_choice,
                  thresholds: HybridThresholds = HybridThresholds()) -> Policy:
    """A policy from a decision function like :func:`hybrid_choice` (the reader's, in chapter 11)."""
    def choose(request: TimedRequest, fleet: Fleet) -> int:
        loads, matches = fleet.loads(), fleet.matches(request.prompt)
        return choice(list(loads), list(matches), request.prompt_len, thresholds.cache_threshold,
                      thresholds.abs_threshold, thresholds.rel_threshold)
    choose.__name__ = "hybrid" if choice is hybrid_choice else f"hybrid ({getattr(choice, '__name__', 'yours')})"
    return choose


POLICIES = ("round-robin", "least-loaded", "least-prefill", "power-of-two", "consistent-hash", "prefix-affinity",
            "hybrid", "hybrid-prefill", "hybrid-smallest-tree")
"""The policies by name. ``hybrid`` sends a weak match to the least-loaded replica (SGLang's gateway since
PR #14650); ``hybrid-smallest-tree`` sends it to the smallest router tree (sgl-router before it).
``least-loaded`` and ``hybrid`` count a replica's load in outstanding requests; ``least-prefill`` and
``hybrid-prefill`` in queued prefill tokens, the work a new request waits behind."""


def make_policy(name: str, num_replicas: int, *, seed: int = 0, key_tokens: int = 256,
                thresholds: HybridThresholds = HybridThresholds()) -> Policy:
    """A fresh policy (its own counter, random stream or ring) by name."""
    makers: dict[str, Callable[[], Policy]] = {
        "round-robin": _round_robin,
        "least-loaded": _least_loaded,
        "least-prefill": _least_prefill,
        "power-of-two": lambda: _power_of_two(seed),
        "consistent-hash": lambda: _consistent_hash(num_replicas, key_tokens),
        "prefix-affinity": _prefix_affinity,
        "hybrid": lambda: hybrid_policy(hybrid_choice, thresholds),
        "hybrid-prefill": lambda: _hybrid_prefill(thresholds),
        "hybrid-smallest-tree": lambda: _hybrid_smallest_tree(num_replicas, thresholds),
    }
    if name not in makers:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    check_whole("key_tokens", key_tokens, 1, 10**6)
    return makers[name]()


# --- a run ---------------------------------------------------------------------------------------
@dataclass
class RouteResult:
    """Every request's outcome under one policy, the replicas as they ended, and the summary figures.

    The first ``warmup`` requests (in arrival order) fill the caches and are not counted: every
    figure below is over the :attr:`measured` ones, so a run does not report its cold start.
    """

    policy: str
    replicas: list[Replica]
    outcomes: list[Outcome]                                         # every request, in arrival order
    decisions: list[dict[str, Any]] = field(default_factory=list)   # what each choice saw
    warmup: int = 0

    @property
    def measured(self) -> list[Outcome]:
        """The outcomes after the warm-up: what the figures count."""
        return self.outcomes[self.warmup:]

    @property
    def prompt_tokens(self) -> int:
        return sum(o.prompt_tokens for o in self.measured)

    @property
    def hit_tokens(self) -> int:
        return sum(o.hit_tokens for o in self.measured)

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found in a cache, over all prompt tokens."""
        return hit_rate(self.hit_tokens, self.prompt_tokens)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens computed, fleet-wide."""
        return self.prompt_tokens - self.hit_tokens

    def ttft_ms(self, percentile: float) -> float:
        return float(np.percentile([o.ttft_ms for o in self.measured], percentile))

    @property
    def requests_per_replica(self) -> list[int]:
        counts = [0] * len(self.replicas)
        for o in self.measured:
            counts[o.replica] += 1
        return counts

    @property
    def load_imbalance(self) -> float:
        """Requests served by the busiest replica over the mean: 1 is even, N is everything on one of N."""
        counts = self.requests_per_replica
        return max(counts) / (sum(counts) / len(counts))

    def summary(self) -> dict[str, Any]:
        return {"policy": self.policy, "replicas": len(self.replicas), "requests": len(self.outcomes),
                "warmup": self.warmup, "measured": len(self.measured),
                "hit_rate": round(self.hit_rate, 4), "prefill_tokens": self.prefill_tokens,
                "ttft_p50_ms": round(self.ttft_ms(50), 2), "ttft_p99_ms": round(self.ttft_ms(99), 2),
                "load_imbalance": round(self.load_imbalance, 3),
                "requests_per_replica": self.requests_per_replica}


def route(requests: Sequence[TimedRequest], policy: str | Policy = "hybrid", num_replicas: int = 4, *,
          num_blocks: int = 3072, block_size: int = 16, cost: CostModel = GPU_COST, seed: int = 0,
          key_tokens: int = 256, thresholds: HybridThresholds = HybridThresholds(), warmup: int = 0) -> RouteResult:
    """Route ``requests`` (in arrival order) over ``num_replicas`` fresh replicas with ``policy``.

    ``policy`` is a name from :data:`POLICIES` or a function ``(request, fleet) -> replica``.
    Each replica has ``num_blocks`` blocks of ``block_size`` tokens: by default 3,072 of 16, room
    for chapter 11's consultants at 600 requests a second (:func:`offered_memory`). The first
    ``warmup`` requests are routed and served like the rest but left out of the result's figures.
    """
    check_whole("num_replicas", num_replicas, 1, MAX_REPLICAS)
    check_whole("num_blocks", num_blocks, 1, 1 << 21)
    check_whole("block_size", block_size, 1, 4096)
    check_whole("warmup", warmup, 0, max(0, len(requests) - 1))      # at least one request is measured
    name = policy if isinstance(policy, str) else getattr(policy, "__name__", "custom")
    choose = make_policy(policy, num_replicas, seed=seed, key_tokens=key_tokens, thresholds=thresholds) \
        if isinstance(policy, str) else policy
    if not callable(choose):
        raise ValueError(f"policy must be a name ({', '.join(POLICIES)}) or a function, got {policy!r}")
    ordered = sorted(requests, key=lambda r: (r.arrival_ms, r.request_id))
    if len({r.request_id for r in ordered}) != len(ordered):
        raise ValueError("request ids must be distinct: a replica tracks its sequences by id")
    for r in ordered:   # every request must fit one replica, checked before anything is routed
        _check_fits(r, num_blocks, block_size)
    replicas = [Replica(num_blocks, block_size, cost) for _ in range(num_replicas)]
    fleet = Fleet(replicas)
    result = RouteResult(name, replicas, [], warmup=warmup)
    with _without_cycle_collection():
        for request in ordered:
            record = fleet.arrive(request)
            index = choose(request, fleet)
            if not isinstance(index, (int, np.integer)) or not 0 <= index < num_replicas:
                raise ValueError(f"policy {name!r} chose {index!r} for request {request.request_id}; "
                                 f"replicas are 0..{num_replicas - 1}")
            result.decisions.append({"request_id": request.request_id, "prompt_len": request.prompt_len,
                                     "replica": int(index), **fleet.seen})
            result.outcomes.append(replicas[int(index)].serve(request, int(index), record))
    return result


@contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector while a run allocates its records, blocks and outcomes.

    Reference counting still frees them; the collector would only rescan them, and every run a
    comparison keeps, again and again: a fifth of a five-seed comparison's time, for nothing.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# --- over seeds ----------------------------------------------------------------------------------
def over_seeds(workload: Callable[..., list[TimedRequest]], rate_per_s: float, policies: Sequence[str],
               seeds: Sequence[int], num_replicas: int = 4, *, num_requests: int, warmup: int,
               **kwargs: Any) -> dict[str, list[RouteResult]]:
    """Each policy on a fresh draw of the workload per seed: ``{policy: [its run on each seed, in seed order]}``.

    One draw is one sample of arrivals, prompts and tenants; a difference between policies that
    changes sign from seed to seed is not a finding. Every policy sees the same draws, so they
    can be compared seed by seed. ``kwargs`` go to :func:`route`.
    """
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {list(seeds)!r}")
    runs: dict[str, list[RouteResult]] = {name: [] for name in policies}
    for seed in seeds:
        requests = workload(num_requests, rate_per_s, seed)
        for name in policies:
            runs[name].append(route(requests, name, num_replicas, seed=seed, warmup=warmup, **kwargs))
    return runs


@dataclass(frozen=True)
class Spread:
    """One figure over seeds: each seed's value, their mean and their range (lowest to highest).

    A range, not a t-interval: with five seeds it assumes nothing about how the figure is
    distributed, and two policies whose ranges do not overlap differ on every draw.
    """

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("a spread needs at least one value")

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def __format__(self, spec: str) -> str:
        """``mean [low–high]``, each number formatted with ``spec``."""
        return f"{self.mean:{spec}} [{self.low:{spec}}–{self.high:{spec}}]"


FIGURES: dict[str, Callable[[RouteResult], float]] = {
    "hit_rate": lambda run: run.hit_rate,
    "ttft_p50_ms": lambda run: run.ttft_ms(50),
    "ttft_p99_ms": lambda run: run.ttft_ms(99),
    "load_imbalance": lambda run: run.load_imbalance,
}
"""The figures a comparison reports, by name."""


def spreads(runs: Sequence[RouteResult]) -> dict[str, Spread]:
    """Each of :data:`FIGURES` over ``runs`` (one policy's runs over seeds)."""
    return {name: Spread(tuple(figure(run) for run in runs)) for name, figure in FIGURES.items()}
