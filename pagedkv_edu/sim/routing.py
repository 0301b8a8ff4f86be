"""Routing requests across replicas, each with its own prefix cache (chapter 11).

Each :class:`Replica` is a block manager with prefix caching, a FIFO queue and one prefill at a
time; the router applies one of :data:`POLICIES` on arrival (blind, consistent hash, prefix
affinity, or SGLang-style cache-aware: :func:`hybrid_choice`, whose weak match goes to the least
loaded replica, and :func:`smallest_tree_choice`, whose weak match goes to the replica with the
smallest :class:`RouterTree`), and :class:`CostModel` gives each request's time to first token.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.block_manager import BlockManager
from ..core.block_table import blocks_needed
from ..core.request import Request as Record
from ..specs import hit_rate
from ..checks import check_whole
from .routing_workloads import TimedRequest

MAX_REPLICAS = 64


# --- the cost model ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    """Time to first token = queueing + uncached prompt tokens × ``prefill_ms_per_token``.

    A replica prefills one request at a time, in arrival order (prefill is compute-bound, so
    two at once take as long as one after the other). Decoding is batched beside it and delays
    no prefill; it only holds the request's blocks for ``output tokens × decode_ms_per_token``.
    The defaults are round numbers of the order of a 1B model on one GPU: 20,000 prefill
    tokens per second, a 2 ms decode step.
    """

    prefill_ms_per_token: float = 0.05
    decode_ms_per_token: float = 2.0

    def __post_init__(self) -> None:
        for name in ("prefill_ms_per_token", "decode_ms_per_token"):
            value = getattr(self, name)
            if not 0 <= value <= 1e6:
                raise ValueError(f"{name} must be in [0, 1e6] ms, got {value!r}")


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

    def cached_tokens(self, prompt: Sequence[int]) -> int:
        """Prompt tokens this replica's cache would give a request admitted next (its queue ahead of it included)."""
        return self.manager.lookup(Record(None, list(prompt))).num_tokens

    def load(self, now_ms: float) -> int:
        """Requests routed here and not finished at ``now_ms``: waiting, prefilling or decoding."""
        return sum(1 for o in self.outcomes if o.finish_ms > now_ms)

    def queue(self, now_ms: float) -> tuple[int, int, int]:
        """(waiting, prefilling, decoding) at ``now_ms``."""
        waiting = sum(1 for o in self.outcomes if o.start_ms > now_ms)
        prefilling = sum(1 for o in self.outcomes if o.start_ms <= now_ms < o.first_token_ms)
        decoding = sum(1 for o in self.outcomes if o.first_token_ms <= now_ms < o.finish_ms)
        return waiting, prefilling, decoding

    def cached_groups(self) -> list[str]:
        """The groups (tenants, chats, the system prompt) whose first block is still in the cache."""
        return [g for g, head in self._groups.items() if self.cached_tokens(head) > 0]

    def serve(self, request: TimedRequest, index: int) -> Outcome:
        """Admit ``request`` after everything routed here before it; ``index`` is this replica's number."""
        manager = self.manager
        _check_fits(request, manager.pool.num_blocks, manager.block_size)
        start = max(request.arrival_ms, self.busy_until)
        self._release(start)
        while self._blocks_for(request) > manager.pool.num_free:   # wait for running requests to finish
            start = max(start, self._live[0][0])
            self._release(start)
        rid = request.request_id
        seq = Record(rid, list(request.prompt))
        hit = manager.lookup(seq)
        granted = manager.admit(seq, request.prompt_len - hit.num_tokens, hit)
        assert granted is not None, "counted above"
        seq.num_computed_tokens = request.prompt_len
        seq.output_token_ids += request.output     # its reply: a chat's next turn may find it
        manager.grow(seq, len(request.output))
        seq.num_computed_tokens = seq.num_tokens
        hit = hit.num_tokens
        first = start + (request.prompt_len - hit) * self.cost.prefill_ms_per_token
        finish = first + len(request.output) * self.cost.decode_ms_per_token
        self.busy_until = first
        heapq.heappush(self._live, (finish, rid, seq))
        self._groups.setdefault(request.group, request.prompt[:manager.block_size + 1])
        outcome = Outcome(rid, index, request.arrival_ms, start, first, finish, request.prompt_len, hit)
        self.outcomes.append(outcome)
        return outcome

    def _blocks_for(self, request: TimedRequest) -> int:
        """Free blocks the request takes for its prompt and reply: new ones, and cached free ones it revives."""
        manager, size = self.manager, self.manager.block_size
        hit = manager.lookup(Record(None, list(request.prompt)))
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

    def __len__(self) -> int:
        return len(self.replicas)

    def loads(self) -> list[int]:
        self.seen["loads"] = [r.load(self.now_ms) for r in self.replicas]
        return self.seen["loads"]

    def matches(self, prompt: Sequence[int]) -> list[int]:
        """Tokens of ``prompt`` each replica's cache holds (what the request would find there)."""
        self.seen["matches"] = [r.cached_tokens(prompt) for r in self.replicas]
        return self.seen["matches"]


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
    64 outstanding requests is a large GPU's load, far above this simulation's replicas, so the
    absolute threshold here defaults to 8.
    """

    cache_threshold: float = 0.3
    abs_threshold: int = 8
    rel_threshold: float = 1.5

    def __post_init__(self) -> None:
        if not 0 <= self.cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold!r}")
        check_whole("abs_threshold", self.abs_threshold, 0, 10**9)
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


def fallback_counts(decisions: Sequence[dict[str, Any]], limits: HybridThresholds = HybridThresholds()
                    ) -> tuple[int, int]:
    """Of a run's decisions (``RoutingResult.decisions``): how many the weak-match fallback made (balanced loads,
    best match at most ``cache_threshold`` of the prompt), and how many the fleet-wide imbalance test made."""
    guard = [imbalanced(d["loads"], limits.abs_threshold, limits.rel_threshold) for d in decisions]
    weak = sum(not g and max(d["matches"]) / d["prompt_len"] <= limits.cache_threshold for g, d in zip(guard, decisions))
    return weak, sum(guard)


class RouterTree:
    """SGLang's router-side tree: **one** token trie for every replica, each node tagged with the replicas sent it.

    Every prompt routed to replica ``r`` is inserted with tag ``r`` (a set bit); ``sizes[r]``
    counts the nodes tagged ``r``, the distinct prompt prefixes the router sent there, in tokens.
    That is the count sgl-router's ``Tree`` keeps per tenant (``tenant_char_count``, on characters)
    and ``get_smallest_tenant()`` reads. The tree remembers what was routed, not what the replica
    still caches; SGLang trims it by LRU every ``--eviction-interval`` seconds (120 on the command
    line), longer than any run in this chapter, so nothing is trimmed here.
    """

    def __init__(self, num_replicas: int) -> None:
        self._children: dict[tuple[int, int], int] = {}     # (node, token) -> child node; node 0 is the root
        self._tags: list[int] = [0]                          # per node: a bit per replica
        self.sizes = [0] * num_replicas

    def insert(self, prompt: Sequence[int], replica: int) -> None:
        node, bit = 0, 1 << replica
        for token in prompt:
            child = self._children.get((node, token))
            if child is None:
                child = self._children[(node, token)] = len(self._tags)
                self._tags.append(0)
            if not self._tags[child] & bit:
                self._tags[child] |= bit
                self.sizes[replica] += 1
            node = child

    def tags(self, prompt: Sequence[int]) -> list[int]:
        """The replicas tagged on the node of ``prompt``'s longest prefix in the tree (ascending)."""
        node = 0
        for token in prompt:
            child = self._children.get((node, token))
            if child is None:
                break
            node = child
        return [r for r in range(len(self.sizes)) if self._tags[node] >> r & 1] if node else []


def _round_robin() -> Policy:
    count = itertools.count()
    return lambda request, fleet: next(count) % len(fleet)


def _least_loaded() -> Policy:
    return lambda request, fleet: least_loaded(fleet.loads())


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


POLICIES = ("round-robin", "least-loaded", "power-of-two", "consistent-hash", "prefix-affinity", "hybrid",
            "hybrid-smallest-tree")
"""The policies by name. ``hybrid`` sends a weak match to the least-loaded replica (SGLang's gateway since
PR #14650); ``hybrid-smallest-tree`` sends it to the smallest router tree (sgl-router before it)."""


def make_policy(name: str, num_replicas: int, *, seed: int = 0, key_tokens: int = 256,
                thresholds: HybridThresholds = HybridThresholds()) -> Policy:
    """A fresh policy (its own counter, random stream or ring) by name."""
    makers: dict[str, Callable[[], Policy]] = {
        "round-robin": _round_robin,
        "least-loaded": _least_loaded,
        "power-of-two": lambda: _power_of_two(seed),
        "consistent-hash": lambda: _consistent_hash(num_replicas, key_tokens),
        "prefix-affinity": _prefix_affinity,
        "hybrid": lambda: hybrid_policy(hybrid_choice, thresholds),
        "hybrid-smallest-tree": lambda: _hybrid_smallest_tree(num_replicas, thresholds),
    }
    if name not in makers:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    check_whole("key_tokens", key_tokens, 1, 10**6)
    return makers[name]()


# --- a run ---------------------------------------------------------------------------------------
@dataclass
class RouteResult:
    """Every request's outcome under one policy, the replicas as they ended, and the summary figures."""

    policy: str
    replicas: list[Replica]
    outcomes: list[Outcome]
    decisions: list[dict[str, Any]] = field(default_factory=list)   # what each choice saw

    @property
    def prompt_tokens(self) -> int:
        return sum(o.prompt_tokens for o in self.outcomes)

    @property
    def hit_tokens(self) -> int:
        return sum(o.hit_tokens for o in self.outcomes)

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found in a cache, over all prompt tokens."""
        return hit_rate(self.hit_tokens, self.prompt_tokens)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens computed, fleet-wide."""
        return self.prompt_tokens - self.hit_tokens

    def ttft_ms(self, percentile: float) -> float:
        return float(np.percentile([o.ttft_ms for o in self.outcomes], percentile))

    @property
    def requests_per_replica(self) -> list[int]:
        return [len(r.outcomes) for r in self.replicas]

    @property
    def load_imbalance(self) -> float:
        """Requests served by the busiest replica over the mean: 1 is even, N is everything on one of N."""
        counts = self.requests_per_replica
        return max(counts) / (sum(counts) / len(counts))

    def summary(self) -> dict[str, Any]:
        return {"policy": self.policy, "replicas": len(self.replicas), "requests": len(self.outcomes),
                "hit_rate": round(self.hit_rate, 4), "prefill_tokens": self.prefill_tokens,
                "ttft_p50_ms": round(self.ttft_ms(50), 2), "ttft_p99_ms": round(self.ttft_ms(99), 2),
                "load_imbalance": round(self.load_imbalance, 3),
                "requests_per_replica": self.requests_per_replica}


def route(requests: Sequence[TimedRequest], policy: str | Policy = "hybrid", num_replicas: int = 4, *,
          num_blocks: int = 2048, block_size: int = 16, cost: CostModel = CostModel(), seed: int = 0,
          key_tokens: int = 256, thresholds: HybridThresholds = HybridThresholds()) -> RouteResult:
    """Route ``requests`` (in arrival order) over ``num_replicas`` fresh replicas with ``policy``.

    ``policy`` is a name from :data:`POLICIES` or a function ``(request, fleet) -> replica``.
    Each replica has ``num_blocks`` blocks of ``block_size`` tokens.
    """
    check_whole("num_replicas", num_replicas, 1, MAX_REPLICAS)
    check_whole("num_blocks", num_blocks, 1, 1 << 21)
    check_whole("block_size", block_size, 1, 4096)
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
    result = RouteResult(name, replicas, [])
    for request in ordered:
        fleet.now_ms, fleet.seen = request.arrival_ms, {}
        index = choose(request, fleet)
        if not isinstance(index, (int, np.integer)) or not 0 <= index < num_replicas:
            raise ValueError(f"policy {name!r} chose {index!r} for request {request.request_id}; "
                             f"replicas are 0..{num_replicas - 1}")
        result.decisions.append({"request_id": request.request_id, "prompt_len": request.prompt_len,
                                 "replica": int(index), **fleet.seen})
        result.outcomes.append(replicas[int(index)].serve(request, int(index)))
    return result


def sweep(workload: Callable[..., list[TimedRequest]], rates_per_s: Sequence[float], policies: Sequence[str],
          num_replicas: int = 4, *, num_requests: int = 200, seed: int = 0, **kwargs: Any) -> dict[tuple[str, float], RouteResult]:
    """Every policy at every arrival rate, on one seeded workload.

    For consultants and tenants only the arrival times scale with the rate; chats start
    conversations faster but keep their think time between turns.
    """
    runs = {}
    for rate in rates_per_s:
        requests = workload(num_requests, rate, seed)
        for name in policies:
            runs[(name, rate)] = route(requests, name, num_replicas, seed=seed, **kwargs)
    return runs
