"""Hypothesis: random fork / append / finish / prefix-cached add histories on real K/V tensors.

Every sequence's K/V is a function of its tokens: K at position ``p`` encodes the whole prefix
``tokens[:p + 1]`` (as a real model's does), V the token itself. After every operation the
machine reads each live sequence back through its block table and compares it with what its
tokens say it must hold. So a prefix hit on a block with other contents, a copy-on-write that
touches a block another sequence sees, or a copy that is not applied, all show up as wrong
values. The reference counts must equal the number of table entries pointing at each block,
which makes a block free exactly when its last reference drops; and at the end nothing leaks.
The forward pass itself checks the copy-on-write rule: it never writes a block whose
reference count is above one.
"""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_edu import runtime
from pagedkv_edu.attention.kv_cache import PagedKVCache
from pagedkv_edu.core.block_manager import BlockCopies, BlockManager
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.core.prefix_cache import ROOT_HASH
from pagedkv_edu.core.request import Request

DEVICE = runtime.device()
PREFIXES = ([], [1, 2, 1, 2, 1, 2, 1], [1, 2, 3, 3, 2])   # shared beginnings, so the cache gets hits
TOKENS = st.integers(0, 3)


def k_value(tokens: list[int]) -> float:
    """A number that names the whole prefix (exact in float32: below 2**20)."""
    h = 7
    for t in tokens:
        h = (h * 31 + t + 1) % 1_000_003
    return float(h)


class SharingMachine(RuleBasedStateMachine):
    """A prefix-caching block manager and a one-layer cache, driven the way the scheduler and the engine drive them."""

    @initialize(num_blocks=st.integers(4, 20), block_size=st.integers(1, 4), backend=st.sampled_from(["torch", "triton"]))
    def build(self, num_blocks: int, block_size: int, backend: str) -> None:
        self.m = BlockManager(num_blocks, block_size, enable_prefix_caching=True)
        self.cache = PagedKVCache(1, num_blocks, block_size, 1, 2, device=DEVICE)
        self.backend = backend
        self.seqs: dict[int, Request] = {}     # the sequences holding memory, by id
        self.next_id = 0

    # --- what the engine does around the manager ----------------------------------------------
    def write(self, seq: Request, start: int) -> None:
        """The forward pass: K/V of positions ``start ..`` (granted, and counted computed) into their slots."""
        tokens = seq.token_ids
        assert seq.num_computed_tokens == len(tokens)
        if start < len(tokens):
            written = self.m.table(seq).slot_mapping(start, len(tokens))
            shared = {s // self.m.block_size for s in written} - {
                b for b in self.m.block_ids(seq) if self.m.pool.ref_counts[b] == 1}
            assert not shared, f"seq {seq.seq_id} writes into blocks {shared} that another sequence sees"
            slots = torch.tensor(written, device=DEVICE)
            k = torch.tensor([k_value(tokens[:p + 1]) for p in range(start, len(tokens))], device=DEVICE)
            v = torch.tensor([float(t) for t in tokens[start:]], device=DEVICE)
            self.cache.store(0, k[:, None, None].expand(-1, 1, 2), v[:, None, None].expand(-1, 1, 2), slots)

    def state(self) -> tuple:
        cache = self.m.prefix_cache
        return (self.m.pool.free_ids(), list(self.m.pool.ref_counts),
                [(s, list(t.block_ids), t.num_tokens) for s, t in self.m.tables.items()],
                [cache.holds(b) for b in range(self.m.pool.num_blocks)],
                (cache.queried_tokens, cache.hit_tokens, cache.num_evictions))

    def admitted(self, tokens: list[int]) -> tuple[Request, int] | None:
        """Look a new sequence up and admit it (the count advanced past its tokens), or None when it does not fit.

        Whether it fits is predicted first: the blocks it takes (new ones, and the cached free
        ones its hit revives) against the free blocks. A refusal must change nothing.
        """
        seq = Request(self.next_id, tokens)
        self.next_id += 1
        hit = self.m.lookup(seq)
        revived = sum(1 for b in hit.block_ids if self.m.pool.ref_counts[b] == 0)
        fits = blocks_needed(len(tokens), self.m.block_size) - len(hit.block_ids) + revived <= self.m.pool.num_free
        before = self.state()
        if not self.m.fits(len(tokens)):           # more blocks than the whole pool: refused by name
            with pytest.raises(ValueError, match="can never be held"):
                self.m.admit(seq, len(tokens) - hit.num_tokens, hit)
            assert self.state() == before, "a refused admission changed something"
            return None
        ids = self.m.admit(seq, len(tokens) - hit.num_tokens, hit)
        if ids is None:
            assert not fits and self.state() == before, "a refused admission changed something"
            return None
        assert fits and ids[:len(hit.block_ids)] == list(hit.block_ids)
        seq.num_computed_tokens = len(tokens)
        return seq, hit.num_tokens

    # --- rules ------------------------------------------------------------------------------------
    @rule(prefix=st.sampled_from(PREFIXES), tail=st.lists(TOKENS, max_size=6))
    def add(self, prefix: list[int], tail: list[int]) -> None:
        tokens = prefix + tail
        if not tokens:
            return
        admitted = self.admitted(tokens)
        if admitted is None:
            return
        seq, hit = admitted
        self.seqs[seq.seq_id] = seq
        assert hit < len(tokens) and hit % self.m.block_size == 0
        self.check_sequence(seq, hit)           # the hit blocks already hold this prefix's K/V
        self.write(seq, hit)

    @rule(prefix=st.sampled_from(PREFIXES[1:]))
    def add_then_preempt_after_the_forward(self, prefix: list[int]) -> None:
        """Admitted, computed, then preempted: its written blocks stay findable with the right K/V.

        (The scheduler grows before it admits, so a sequence is never released before the
        forward pass of the step that admitted it.)
        """
        admitted = self.admitted(list(prefix))
        if admitted is not None:
            seq, hit = admitted
            self.write(seq, hit)
            self.m.release(seq)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = self.seqs[data.draw(st.sampled_from(sorted(self.seqs)))]
        child = parent.fork(self.next_id, 0)
        self.next_id += 1
        child.num_computed_tokens = parent.num_computed_tokens
        self.m.fork(parent, child)
        self.seqs[child.seq_id] = child

    @precondition(lambda self: self.seqs)
    @rule(data=st.data(), token=TOKENS)
    def append(self, data: st.DataObject, token: int) -> None:
        seq = self.seqs[data.draw(st.sampled_from(sorted(self.seqs)))]
        seq.output_token_ids.append(token)
        before = self.state()
        if not self.m.fits(seq.num_tokens):        # more blocks than the whole pool: refused by name
            with pytest.raises(ValueError, match="can never be held"):
                self.m.grow(seq, 1)
            assert self.state() == before, "a refused growth changed something"
            seq.output_token_ids.pop()
            return
        fits = self.m.blocks_to_grow(seq, 1) <= self.m.pool.num_free
        if self.m.grow(seq, 1) is None:
            assert not fits and self.state() == before, "a refused growth changed something"
            seq.output_token_ids.pop()
            return
        assert fits
        seq.num_computed_tokens += 1
        self.cache.copy_blocks(self.m.take_copies().copy, self.backend)   # before the forward, as the engine does
        self.write(seq, seq.num_tokens - 1)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        self.m.release(self.seqs.pop(data.draw(st.sampled_from(sorted(self.seqs)))))

    # --- invariants -------------------------------------------------------------------------------
    def check_sequence(self, seq: Request, upto: int) -> None:
        tokens = seq.token_ids
        k, v = self.cache.gather(0, self.m.block_ids(seq), max(upto, 1))
        for p in range(upto):
            assert k[p, 0, 0].item() == k_value(tokens[:p + 1]), f"seq {seq.seq_id} position {p}: K of another prefix"
            assert v[p, 0, 0].item() == tokens[p], f"seq {seq.seq_id} position {p}: V of another token"

    @invariant()
    def every_sequence_reads_its_own_tokens(self) -> None:
        assert self.m.sequences == list(self.seqs.values())
        for seq in self.seqs.values():
            assert self.m.table(seq).num_tokens == seq.num_tokens
            self.check_sequence(seq, seq.num_tokens)

    @invariant()
    def reference_counts_are_the_table_entries(self) -> None:
        refs = Counter(b for seq in self.m.sequences for b in self.m.block_ids(seq))
        counts = self.m.pool.ref_counts
        assert all(c >= 0 for c in counts)
        assert all(counts[b] == refs.get(b, 0) for b in range(len(counts)))
        assert set(self.m.pool.free_ids()) == {b for b, c in enumerate(counts) if c == 0}   # free exactly at zero
        assert self.m.take_copies() == BlockCopies()

    @invariant()
    def a_cached_blocks_parent_is_cached(self) -> None:
        """A cached block's parent hash is cached too: a child is never left findable after its parent is evicted."""
        held = [h for h in map(self.m.prefix_cache.holds, range(self.m.pool.num_blocks)) if h is not None]
        hashes = {h.block_hash for h in held}
        orphans = [h for h in held if h.parent_hash != ROOT_HASH and h.parent_hash not in hashes]
        assert not orphans, f"cached blocks whose parent hash is not cached: {orphans}"

    def teardown(self) -> None:
        if not hasattr(self, "m"):
            return
        for seq in self.seqs.values():
            self.m.release(seq)
        assert self.m.pool.num_free == self.m.pool.num_blocks and not self.m.tables   # nothing leaks
        assert all(c == 0 for c in self.m.pool.ref_counts)


SharingMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestSharing = SharingMachine.TestCase


# --- beam search: a genealogy replayed on the block manager ------------------------------------------
@st.composite
def genealogies(draw: st.DrawFn) -> list[list[int]]:
    """A random beam genealogy: step 1 forks the prompt, later steps pick parents among the last step's beams."""
    width = draw(st.integers(1, 5))
    steps = [[0] * width]
    for _ in range(draw(st.integers(0, 25))):
        steps.append(sorted(draw(st.lists(st.integers(0, width - 1), min_size=width, max_size=width))))
    return steps


def expected_blocks(prompt_len: int, genealogy: list[list[int]], block_size: int) -> list[int]:
    """Distinct blocks after every step, from the genealogy alone.

    A full block is shared by every beam whose ancestry agrees up to the block's last token (the
    prompt's full blocks by all); after a step's appends every partly filled last block is private.
    """
    lineages: list[tuple[int, ...]] = [()]           # each live beam's ancestor at every step (unique ids)
    counts, next_id = [], 0
    for step, parents in enumerate(genealogy, 1):
        new = []
        for p in parents:
            new.append(lineages[p] + (next_id,))
            next_id += 1
        lineages = new
        length = prompt_len + step
        full = length // block_size
        distinct = set()
        for lineage in lineages:
            for j in range(full):
                last = (j + 1) * block_size - prompt_len   # the output step that wrote the block's last token
                distinct.add((j, lineage[last - 1] if last > 0 else None))
        counts.append(len(distinct) + (len(lineages) if length % block_size else 0))
    return counts


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30), genealogies(), st.integers(1, 7))
def test_beam_blocks_holds_exactly_the_blocks_the_genealogy_shares(prompt_len: int, genealogy: list[list[int]],
                                                                    block_size: int) -> None:
    from pagedkv_edu.sim.sharing import beam_blocks

    memory = beam_blocks(prompt_len, genealogy, block_size)
    assert memory.shared == expected_blocks(prompt_len, genealogy, block_size)
    assert memory.independent == [len(g) * -(-(prompt_len + s) // block_size) for s, g in enumerate(genealogy, 1)]


def test_beam_blocks_refuses_a_genealogy_that_does_not_start_with_the_fork() -> None:
    from pagedkv_edu.sim.sharing import beam_blocks

    for bad in ([], [[0, 1]], [[0, 0], [0, 2]]):
        with pytest.raises(ValueError):
            beam_blocks(5, bad, 4)


def test_workload_beam_saving_replays_the_committed_record() -> None:
    from pagedkv_edu.paper_workloads import paper_shaped
    from pagedkv_edu.sim.sharing import BEAM_RECORD, load_beam_genealogies, workload_beam_saving

    requests = paper_shaped("Alpaca", 20, seed=1)
    savings = [workload_beam_saving(requests, load_beam_genealogies(k), 16) for k in (2, 4, 6)]
    assert 0.2 < savings[0] < savings[1] < savings[2] < 0.9
    assert workload_beam_saving(requests, load_beam_genealogies(4), 16, seed=3) != savings[1]   # the start is seeded
    assert workload_beam_saving(requests, [[[0], [0], [0]]], 16) == 0.0                         # one beam shares nothing
    assert '"benchmark": "beam-genealogies"' in BEAM_RECORD.read_text()
