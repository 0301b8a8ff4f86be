"""Every seam takes a second, minimal implementation and the engine gives the same tokens (issue 27, design item 4).

The seams (``pagedkv_edu.core.protocols``): the KV memory the scheduler asks, the scheduling policy, the prefix
cache inside the memory, the attention function, the router policy. Each minimal part here is written from the
protocol alone, as a reader would write theirs, and plugged into the running system.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from pagedkv_edu.core.block_manager import BlockCopies, BlockManager, MemoryUsage, memory_usage
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.prefix_cache import NO_HIT, ROOT_HASH, BlockHasher, PrefixHit
from pagedkv_edu.core.request import SamplingParams, Status
from pagedkv_edu.core.scheduler import SchedulerState
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.model.loading import load_model


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random").model


def prompts(vocab: int, n: int = 6, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(100, vocab) for _ in range(9)]      # two full blocks of 4 and one token: prefix hits
    return [shared + [rng.randrange(100, vocab) for _ in range(rng.randint(2, 7))] for _ in range(n)]


def serve(engine: LLMEngine, ids: list[list[int]], params: SamplingParams) -> dict[int, list[list[int]]]:
    for p in ids:
        engine.add_request(p, params)
    out: dict[int, list[list[int]]] = {}
    while engine.has_unfinished:
        for o in engine.step():
            out[o.request_id] = [list(c.token_ids) for c in o.completions]
    return out


PARAMS = SamplingParams(max_tokens=8, ignore_eos=True)
SETTINGS = dict(kv_budget_tokens=96, block_size=4, max_seq_len=64, watermark=0.0, max_num_batched_tokens=24)
"""24 blocks of 4 for six requests of up to 16 + 8 tokens: they preempt; a request, recomputed whole, fits the budget."""


# --- the memory -----------------------------------------------------------------------------------
class MiniManager:
    """A block manager from the protocol alone: a free list, tables by record, tail-first release; no sharing."""

    swap = None
    prefix_cache = None

    def __init__(self, pool: BlockPool) -> None:
        self.pool, self.block_size = pool, pool.block_size
        self.held: dict[Any, list[int]] = {}

    def fits(self, num_tokens: int) -> bool:
        return -(-num_tokens // self.block_size) <= self.pool.num_blocks

    def lookup(self, seq: Any) -> PrefixHit:
        return NO_HIT

    def _room(self, seq: Any, ids: list[int], n: int) -> list[int] | None:
        need = -(-(seq.num_computed_tokens + n) // self.block_size) - len(ids)
        return None if need > self.pool.num_free else self.pool.allocate(need)

    def admit(self, seq: Any, n: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        new = self._room(seq, [], n)
        if new is not None:
            self.held[seq] = new
        return None if new is None else list(new)

    def grow(self, seq: Any, n: int) -> list[int] | None:
        new = self._room(seq, self.held[seq], n)
        if new is not None:
            self.held[seq] += new
        return new

    def release(self, seq: Any) -> list[int]:
        ids = self.held.pop(seq)[::-1]
        self.pool.free_all(ids)
        return ids

    def fork(self, parent: Any, child: Any) -> None:
        raise ValueError("this minimal manager does not share blocks")

    def swap_out(self, seq: Any) -> bool:
        return False

    def take_copies(self) -> BlockCopies:
        return BlockCopies()

    def block_ids(self, seq: Any) -> list[int]:
        return list(self.held[seq])

    def usage(self) -> MemoryUsage:
        return memory_usage(self.block_size, self.pool.capacity_tokens,
                            ((ids, s.num_computed_tokens) for s, ids in self.held.items()))


def test_a_minimal_block_manager_serves_the_same_tokens_and_tables(tiny) -> None:
    ids = prompts(tiny.config.vocab_size)
    shipped = LLMEngine(tiny, **SETTINGS)
    mini = LLMEngine(tiny, memory=MiniManager(BlockPool(24, 4)), **SETTINGS)
    tables: list[tuple[dict, dict]] = []

    def run(engine: LLMEngine) -> dict:
        for p in ids:
            engine.add_request(p, PARAMS)
        out, seen = {}, []
        while engine.has_unfinished:
            for o in engine.step():
                out[o.request_id] = o.token_ids
            seen.append(({s.seq.seq_id: s.new_block_ids for s in engine.last_step.scheduled},
                         [s.seq_id for s in engine.last_step.preempted]))
        tables.append(seen)
        return out

    assert run(shipped) == run(mini)
    assert tables[0] == tables[1] and any(pre for _, pre in tables[0])   # same blocks, and it preempted


# --- the scheduling policy ------------------------------------------------------------------------
def first_come_first_served(state: SchedulerState) -> dict[Any, int]:
    """A second policy: no chunking (a prompt is admitted whole or waits), growth oldest first, newest preempted."""
    plan: dict[Any, int] = {}
    preempted = False
    for seq in list(state.running):
        new = seq.num_tokens - seq.num_computed_tokens
        while seq.status is Status.RUNNING and new and state.memory.grow(seq, new) is None:
            state.preempt(state.running[-1])
            preempted = True
        if seq.status is Status.RUNNING and new:
            plan[seq] = new
    while state.waiting and not preempted:
        seq = state.waiting[0]
        hit = state.memory.lookup(seq)
        new = seq.num_tokens - hit.num_tokens
        if sum(plan.values()) + new > state.token_budget or state.memory.admit(seq, new, hit) is None:
            break
        state.running.append(state.waiting.popleft())
        plan[seq] = new
    return plan


def test_a_second_scheduling_policy_gives_the_same_tokens(tiny) -> None:
    ids = prompts(tiny.config.vocab_size, seed=1)
    shipped = serve(LLMEngine(tiny, **SETTINGS), ids, PARAMS)
    fcfs = LLMEngine(tiny, schedule=first_come_first_served, **SETTINGS)
    assert serve(fcfs, ids, PARAMS) == shipped
    assert fcfs.scheduler.num_preemptions > 0


def test_a_policy_whose_plan_is_not_what_memory_granted_is_stopped_naming_it(tiny) -> None:
    def greedy(state: SchedulerState) -> dict[Any, int]:
        plan = first_come_first_served(state)
        return {seq: n + 1 for seq, n in plan.items()}     # claims a token more than it asked memory for

    engine = LLMEngine(tiny, schedule=greedy, **SETTINGS)
    engine.add_request([5, 6, 7], PARAMS)
    with pytest.raises(ValueError, match="greedy.*planned 4 tokens.*granted it 3 tokens"):
        engine.step()


# --- the prefix cache ------------------------------------------------------------------------------
class DictPrefixCache:
    """A prefix cache from the protocol alone: hash -> block, what each block holds, lazy eviction."""

    def __init__(self, pool: BlockPool) -> None:
        self.hasher = BlockHasher(pool.block_size)
        self.block_of: dict[bytes, int] = {}
        self.held: dict[int, tuple[bytes, bytes, tuple[int, ...]]] = {}
        pool.on_reuse, pool.is_cached = self.evict, self.__contains__

    def lookup(self, token_ids: Sequence[int], hashes: Sequence[bytes]) -> PrefixHit:
        size, found, parent = self.hasher.block_size, [], ROOT_HASH
        for i, h in enumerate(hashes[:(len(token_ids) - 1) // size]):
            block = self.block_of.get(h)
            if block is None or self.held[block][1:] != (parent, tuple(token_ids[i * size:(i + 1) * size])):
                break
            found.append(block)
            parent = h
        return PrefixHit(tuple(found), len(found) * size)

    def insert(self, block_id: int, block_hash: bytes, parent_hash: bytes, token_ids: Sequence[int]) -> bool:
        if block_hash in self.block_of or block_id in self.held:
            return False
        self.block_of[block_hash], self.held[block_id] = block_id, (block_hash, parent_hash, tuple(token_ids))
        return True

    def record(self, queried: int, hit: int) -> None:
        pass

    def evict(self, block_id: int) -> None:
        if block_id in self.held:
            del self.block_of[self.held.pop(block_id)[0]]

    def __contains__(self, block_id: int) -> bool:
        return block_id in self.held


def test_a_second_prefix_cache_gives_the_same_tokens_and_the_same_hits(tiny) -> None:
    ids = prompts(tiny.config.vocab_size, seed=2)
    shipped = LLMEngine(tiny, enable_prefix_caching=True, **SETTINGS)
    dict_cache = LLMEngine(tiny, memory=BlockManager(24, 4, 64, prefix_cache=DictPrefixCache), **SETTINGS)
    assert serve(dict_cache, ids, PARAMS) == serve(shipped, ids, PARAMS)
    assert dict_cache.scheduler.counts == shipped.scheduler.counts
    assert shipped.scheduler.counts.prefix_hit_tokens >= 8 * (len(ids) - 1) // 2   # the shared blocks were found


# --- the attention function ------------------------------------------------------------------------
def gather_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                     seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention from the call shape alone: gather each sequence's K/V slot by slot, mask causally, softmax."""
    size, out = k_cache.shape[1], torch.empty_like(q)
    groups = q.shape[1] // k_cache.shape[2]
    for s in range(len(seq_lens)):
        a, b, n = int(query_start_loc[s]), int(query_start_loc[s + 1]), int(seq_lens[s])
        slots = [int(block_tables[s, p // size]) * size + p % size for p in range(n)]
        k = k_cache.flatten(0, 1)[slots].repeat_interleave(groups, 1).float()   # [n, heads, dim]
        v = v_cache.flatten(0, 1)[slots].repeat_interleave(groups, 1).float()
        scores = torch.einsum("qhd,khd->hqk", q[a:b].float(), k) * scale
        positions = torch.arange(n - (b - a), n)[:, None]
        scores = scores.masked_fill(torch.arange(n)[None, :] > positions, float("-inf"))
        out[a:b] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)
    return out


def test_a_second_attention_function_gives_the_same_tokens(tiny) -> None:
    ids = prompts(tiny.config.vocab_size, n=3, seed=3)
    shipped = serve(LLMEngine(tiny, **SETTINGS), ids, PARAMS)
    assert serve(LLMEngine(tiny, backend=gather_attention, **SETTINGS), ids, PARAMS) == shipped


# --- the router policy -----------------------------------------------------------------------------
def test_a_second_router_policy_routes_as_the_shipped_one() -> None:
    from pagedkv_edu.sim.routing import route
    from pagedkv_edu.sim.routing_workloads import WORKLOADS

    requests = WORKLOADS["tenants"](seed=0)[:80]
    seen: deque[int] = deque()

    def fewest_outstanding(request: Any, fleet: Any) -> int:
        """Least loaded, first of equals, written again."""
        loads = fleet.loads()
        seen.append(min(loads))
        return loads.index(min(loads))

    shipped = route(requests, "least-loaded", 4)
    mine = route(requests, fewest_outstanding, 4)
    assert [o.replica for o in mine.outcomes] == [o.replica for o in shipped.outcomes] and len(seen) == 80


def test_a_policy_that_plans_a_float_is_stopped_before_any_count_changes() -> None:
    from pagedkv_edu.core.block_manager import BlockManager as Manager
    from pagedkv_edu.core.request import Request
    from pagedkv_edu.core.scheduler import Scheduler, schedule

    def floats(state: SchedulerState) -> dict[Any, float]:
        return {seq: float(n) for seq, n in schedule(state).items()}

    scheduler = Scheduler(Manager(8, 4), schedule=floats)
    seq = Request("a", None, SamplingParams(max_tokens=4), num_prompt_tokens=5)
    scheduler.add(seq)
    with pytest.raises(ValueError, match="floats planned 5.0 tokens for 'a': a token count is a whole number"):
        scheduler.schedule()
    assert seq.num_computed_tokens == 0
