"""Fork and copy-on-write: shared blocks, the copy rule, and the block-copy kernels on real tensors."""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu import runtime
from pagedkv_edu.attention.triton_copy import copy_blocks
from pagedkv_edu.core.block_manager import BlockCopies, BlockManager
from pagedkv_edu.core.request import Request
from pagedkv_edu.attention.kv_cache import PagedKVCache
from pagedkv_edu.sim.sharing import parallel_sampling_blocks

DEVICE = runtime.device()


def state(m: BlockManager) -> tuple:
    return (m.pool.free_ids(), list(m.pool.ref_counts), [(s, list(t.block_ids), t.num_tokens) for s, t in m.tables.items()])


def admitted(m: BlockManager, seq_id: str, num_tokens: int) -> Request:
    """A memory-only sequence whose first ``num_tokens`` are in memory (the test plays the scheduler)."""
    seq = Request(seq_id, None, num_prompt_tokens=num_tokens)
    assert m.admit(seq, num_tokens) is not None
    seq.num_computed_tokens = num_tokens
    return seq


def forked(m: BlockManager, parent: Request, seq_id: str) -> Request:
    """A child record continuing ``parent``, sharing all its blocks."""
    child = parent.fork(seq_id, 1)
    child.num_computed_tokens = parent.num_computed_tokens
    m.fork(parent, child)
    return child


def grown(m: BlockManager, seq: Request) -> list[int] | None:
    """One more token: appended to the record, room made for it, counted once granted."""
    seq.output_token_ids.append(0)
    new = m.grow(seq, 1)
    if new is None:
        seq.output_token_ids.pop()
    else:
        seq.num_computed_tokens += 1
    return new


def test_fork_shares_every_block_and_the_first_append_copies_the_partial_last_block() -> None:
    m = BlockManager(8, 4)
    p = admitted(m, "p", 6)                            # blocks 0 (4/4) and 1 (2/4)
    c = forked(m, p, "c")
    child = m.table(c)
    assert child.block_ids == [0, 1] and child.num_tokens == 6 and m.ref_count_of(p) == [2, 2]
    assert m.pool.num_used == 2                               # one copy of the prompt in memory
    assert grown(m, c) == [2]                        # copy-on-write: a fresh block replaces block 1
    assert m.block_ids(c) == [0, 2] and m.block_ids(p) == [0, 1]
    assert m.ref_count_of(p) == [2, 1] and m.take_copies() == BlockCopies(copy=[(1, 2)])
    assert grown(m, p) == [] and m.take_copies() == BlockCopies()   # block 1 is the parent's alone now: no copy
    assert m.take_copies() == BlockCopies()


def test_a_full_shared_last_block_is_never_copied() -> None:
    m = BlockManager(8, 4)
    p = admitted(m, "p", 8)
    c = forked(m, p, "c")
    assert grown(m, c) == [2] and m.take_copies() == BlockCopies()   # a new block, nothing to copy
    assert m.ref_count_of(c) == [2, 2, 1]


def test_the_last_reference_frees_a_block() -> None:
    m = BlockManager(8, 4)
    p = admitted(m, "p", 6)
    c1 = forked(m, p, "c1")
    c2 = forked(m, c1, "c2")
    assert m.ref_count_of(p) == [3, 3]
    m.release(p)
    m.release(c1)
    assert m.pool.num_used == 2 and m.ref_count_of(c2) == [1, 1]
    assert m.release(c2) == [1, 0] and m.pool.num_free == 8


def test_copy_on_write_needs_a_free_block_and_fails_whole() -> None:
    m = BlockManager(3, 4)
    p = admitted(m, "p", 6)
    q = admitted(m, "q", 1)
    c = forked(m, p, "c")
    assert m.pool.num_free == 0 and m.blocks_to_grow(c, 1) == 1 and m.blocks_to_grow(q, 1) == 0
    before = state(m)
    assert grown(m, c) is None                        # no free block to copy its shared last block into
    assert state(m) == before and m.take_copies() == BlockCopies()
    assert grown(m, q) == []                          # room left in q's own last block is still usable


def test_a_queued_copy_into_a_block_freed_in_the_same_step_is_dropped() -> None:
    m = BlockManager(8, 4)
    p = admitted(m, "p", 6)
    c = forked(m, p, "c")
    grown(m, c)                                      # queues (1, 2)
    m.release(c)                                               # preempted before the forward: block 2 is free again
    assert m.take_copies() == BlockCopies()


def cache_with_values(num_blocks: int = 8) -> PagedKVCache:
    cache = PagedKVCache(2, num_blocks, 4, 2, 8, device=DEVICE)
    for i, t in enumerate(cache.k_caches + cache.v_caches):
        t.copy_(torch.arange(t.numel(), dtype=t.dtype, device=DEVICE).reshape(t.shape) + 1000 * i)
    return cache


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_copy_on_write_on_real_tensors_leaves_the_parents_view_unchanged(backend: str) -> None:
    m = BlockManager(8, 4)
    cache = cache_with_values()
    p = admitted(m, "p", 6)
    c = forked(m, p, "c")
    parent_view = [cache.gather(layer, m.block_ids(p), 6) for layer in range(2)]
    parent_blocks = [t[m.block_ids(p)].clone() for t in cache.k_caches + cache.v_caches]
    grown(m, c)
    cache.copy_blocks(m.take_copies().copy, backend)
    new_slot = torch.tensor(m.table(c).slot_mapping(6, 7), device=DEVICE)
    for layer in range(2):                                     # the child writes its 7th token into its own block
        cache.store(layer, torch.full((1, 2, 8), -1.0, device=DEVICE), torch.full((1, 2, 8), -2.0, device=DEVICE),
                    new_slot)
    after = [t[m.block_ids(p)] for t in cache.k_caches + cache.v_caches]
    assert all(torch.equal(a, b) for a, b in zip(after, parent_blocks))   # every slot, not just the 6 it reads
    for layer in range(2):
        k_p, v_p = cache.gather(layer, m.block_ids(p), 6)
        k_c, v_c = cache.gather(layer, m.block_ids(c), 7)
        assert torch.equal(k_p, parent_view[layer][0]) and torch.equal(v_p, parent_view[layer][1])
        assert torch.equal(k_c[:6], k_p) and torch.equal(v_c[:6], v_p)     # the copy carries the shared prefix
        assert bool((k_c[6] == -1).all()) and bool((v_c[6] == -2).all())


@pytest.mark.parametrize("seed", range(3))
def test_the_triton_copy_kernel_matches_torch_on_random_shapes(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    num_blocks, block_size, heads, dim = (int(x) for x in torch.randint(2, 9, (4,), generator=gen))
    num_blocks += 8
    shape = (num_blocks, block_size, heads, dim)
    k = torch.randn(shape, generator=gen).to(DEVICE)
    v = torch.randn(shape, generator=gen).to(DEVICE)
    order = torch.randperm(num_blocks, generator=gen).tolist()
    pairs = list(zip(order[:4], order[4:8]))                 # sources and destinations apart
    results = {}
    for backend in ("torch", "triton"):
        kb, vb = k.clone(), v.clone()
        for _, dst in pairs:                                   # poison the destinations
            kb[dst] = float("nan")
            vb[dst] = float("nan")
        copy_blocks(kb, vb, pairs, backend)
        results[backend] = (kb, vb)
    expected_k, expected_v = k.clone(), v.clone()
    for src, dst in pairs:
        expected_k[dst], expected_v[dst] = k[src], v[src]
    for kb, vb in results.values():
        assert torch.equal(kb, expected_k) and torch.equal(vb, expected_v)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_copies_read_every_source_before_writing(backend: str) -> None:
    """Block 2 is both a source and a destination in one step: the copy from it sees its old contents."""
    k = torch.arange(4.0, device=DEVICE).reshape(4, 1, 1, 1).repeat(1, 2, 1, 2).contiguous()
    v = -k
    copy_blocks(k, v, [(2, 3), (1, 2)], backend)
    assert k[:, 0, 0, 0].tolist() == [0.0, 1.0, 1.0, 2.0] and v[:, 0, 0, 0].tolist() == [0.0, -1.0, -1.0, -2.0]


@pytest.mark.parametrize("pairs, match", [
    ([(0, 8)], "destination block 8 is out of range"),
    ([(-1, 2)], "source block -1 is out of range"),
    ([(1, 1)], "onto itself"),
    ([(1, 2), (3, 2)], "destination of two copies"),
    ([(1, 2, 3)], "pair of block ids"),
    ([(1.0, 2)], "pair of block ids"),
])
def test_bad_copies_are_refused_before_any_layer_changes(pairs, match: str) -> None:
    cache = cache_with_values()
    before = [t.clone() for t in cache.k_caches + cache.v_caches]
    with pytest.raises(ValueError, match=match):
        cache.copy_blocks(pairs, "triton")
    assert all(torch.equal(a, b) for a, b in zip(before, cache.k_caches + cache.v_caches))


def test_parallel_sampling_holds_the_prompt_once() -> None:
    memory = parallel_sampling_blocks(prompt_len=10, output_len=6, n=4, block_size=4)
    # 10 prompt tokens: 2 full blocks shared, the half block copied by 3 of the 4 samples.
    assert memory.copies == 3
    assert memory.shared[0] == 2 + 4 and memory.independent[0] == 4 * 3
    assert memory.shared[-1] == 2 + 4 * 2 and memory.independent[-1] == 4 * 4
    assert 0 < memory.saving < 1 and parallel_sampling_blocks(10, 6, 1, 4).saving == 0


def test_growing_every_sharer_by_one_copies_once_fewer_than_the_sharers() -> None:
    """Sharers of a partly filled last block copy it in turn: each copy drops a reference, the last writes in place."""
    m = BlockManager(8, 4)
    a = admitted(m, "a", 6)       # blocks [0, 1], block 1 half full
    b = forked(m, a, "b")
    c = forked(m, a, "c")
    d = admitted(m, "d", 4)       # a full last block: a new block
    need, copies = {}, []
    for seq in (a, b, c, d):
        need[seq.seq_id] = m.blocks_to_grow(seq, 1)
        assert len(grown(m, seq)) == need[seq.seq_id]
        copies += m.take_copies().copy
    assert need == {"a": 1, "b": 1, "c": 0, "d": 1}
    assert copies == [(1, 3), (1, 4)] and m.block_ids(c) == [0, 1] and m.ref_count_of(c) == [3, 1]
