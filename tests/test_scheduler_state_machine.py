"""A hypothesis state machine over the scheduler and the block manager it owns.

Random requests arrive (prompts drawn from a tiny alphabet, so prefixes repeat and the prefix
cache hits), steps run under random budgets (a token cap: chunked prefill; a sequence cap;
a watermark), running sequences fork (copy-on-write), finish, or are preempted when the pool
runs dry. After every action the memory's books must balance:

* free + used = total, and a block is free exactly when nobody references it;
* every block's reference count equals the number of table entries that name it, and no
  table names a block twice;
* every running sequence has a table holding exactly its computed tokens, and only they do;
* utilisation (tokens held / slots held, a shared block counted once) is at most 1;
* no request is lost: each is waiting, running or finished, exactly once;
* a step never preempts what it admitted, never exceeds its token or sequence cap, and its
  copy-on-write destinations are blocks of live tables;
* the runner's persistent block table, written only from the ids each scheduled sequence
  gained (``new_block_ids`` at ``first_new_block``), equals the block manager's tables.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.core.request import Request, SamplingParams, Status
from pagedkv_edu.core.scheduler import Scheduler
from pagedkv_edu.core.swap import SwapSpace
from pagedkv_edu.engine.model_runner import BlockTableRows

STEPS = Counter()   # schedule() calls across the whole run: the test below checks there were enough


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(num_blocks=st.integers(2, 24), block_size=st.integers(1, 4), watermark=st.integers(0, 2),
                max_num_seqs=st.none() | st.integers(1, 6), budget=st.none() | st.integers(1, 24),
                host_blocks=st.none() | st.integers(1, 16))
    def build(self, num_blocks: int, block_size: int, watermark: int, max_num_seqs: int | None,
              budget: int | None, host_blocks: int | None) -> None:
        self.swap = None if host_blocks is None else SwapSpace(host_blocks, block_size)   # preemption by swap
        self.manager = BlockManager(num_blocks, block_size, enable_prefix_caching=True, watermark_blocks=watermark,
                                    swap=self.swap)
        self.scheduler = Scheduler(self.manager, max_num_seqs, budget, "recompute" if self.swap is None else "swap")
        self.rows = BlockTableRows(num_blocks)   # the runner's table, kept from the step's changes only
        self.finished: list[Request] = []
        self.added: dict[str, Request] = {}      # every sequence queued or forked, by id
        self.next_id = 0

    @rule(length=st.integers(1, 12), alphabet=st.integers(1, 3), max_tokens=st.integers(1, 40), data=st.data())
    def add(self, length: int, alphabet: int, max_tokens: int, data: st.DataObject) -> None:
        prompt = data.draw(st.lists(st.integers(0, alphabet), min_size=length, max_size=length))
        seq = Request(f"s{self.next_id}", prompt, SamplingParams(max_tokens=max_tokens))
        self.next_id += 1
        if self.manager.fits(seq.max_num_tokens):
            self.scheduler.add(seq)
            self.added[seq.seq_id] = seq
            return
        queued = list(self.scheduler.waiting)    # it could outgrow the whole memory: refused, nothing queued
        try:
            self.scheduler.add(seq)
        except ValueError as exc:
            assert "can never fit" in str(exc)
        else:
            raise AssertionError(f"{seq.seq_id} can outgrow the memory but was queued")
        assert list(self.scheduler.waiting) == queued

    @rule(tokens=st.lists(st.integers(0, 3), min_size=2, max_size=16))
    def steps(self, tokens: list[int]) -> None:
        """A few scheduler steps in a row (each sampling sequence appends the token), all invariants after each."""
        for token in tokens:
            self._step(token)
            self.blocks_balance()
            self.every_running_sequence_and_only_they_hold_memory()
            self.swapped_sequences_and_only_they_hold_host_blocks()
            self.no_request_is_lost()

    def _step(self, token: int) -> None:
        STEPS["steps"] += 1
        running_before = set(self.scheduler.running)
        step = self.scheduler.schedule()
        admitted = set(step.admitted)
        assert not admitted & set(step.preempted), "a sequence admitted and preempted in one step"
        assert not admitted & running_before
        if self.scheduler.max_num_batched_tokens is not None:
            assert step.num_tokens <= self.scheduler.max_num_batched_tokens
        if self.scheduler.max_num_seqs is not None:
            assert sum(s.num_seqs for s in self.scheduler.running) <= self.scheduler.max_num_seqs
        live = {b for seq in self.manager.sequences for b in self.manager.block_ids(seq)}
        for src, dst in step.copies.copy:
            assert src != dst and dst in live
        assert {dst for _, dst in step.copies.swap_in} <= live
        for seq in step.preempted + step.failed:
            self.rows.release(seq.seq_id)
        self.rows.arrange([s.seq.seq_id for s in step.scheduled])
        for row, s in enumerate(step.scheduled):
            assert s.num_new_tokens >= 1 and s.seq_len <= s.seq.num_tokens
            assert s.seq.num_computed_tokens == s.seq_len == self.manager.table(s.seq).num_tokens
            self.rows.append_row(row, s)
        for seq_id in self.rows.order:   # every row the runner holds is its sequence's live table
            assert self.rows.ids(seq_id) == self.manager.block_ids(self.added[seq_id]), seq_id
        assert self.rows.order[:len(step.scheduled)] == [s.seq.seq_id for s in step.scheduled]   # batch order
        self.finished += step.failed
        for s in step.scheduled:          # the engine's part: sample, and stop at max_tokens
            if s.samples:
                s.seq.output_token_ids.append(token)
                if len(s.seq.output_token_ids) >= s.seq.params.max_tokens:
                    self._finish(s.seq)
        STEPS["swapped_out"] += sum(seq.status is Status.SWAPPED for seq in step.preempted)
        STEPS["blocks_swapped_in"] += len(step.copies.swap_in)

    def _finish(self, seq: Request) -> None:
        self.scheduler.finish(seq)
        self.rows.release(seq.seq_id)
        self.finished.append(seq)

    @precondition(lambda self: any(s.output_token_ids for s in self.scheduler.running))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        self._finish(data.draw(st.sampled_from([s for s in self.scheduler.running if s.output_token_ids])))

    @precondition(lambda self: self._room() and any(s.output_token_ids and s.num_computed_tokens == s.num_tokens - 1
                                                    for s in self.scheduler.running))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from([s for s in self.scheduler.running
                                            if s.output_token_ids and s.num_computed_tokens == s.num_tokens - 1]))
        child = parent.fork(f"{parent.seq_id}.{self.next_id}", 1)
        self.next_id += 1
        self.scheduler.fork(parent, child)
        self.added[child.seq_id] = child

    def _room(self) -> bool:
        cap = self.scheduler.max_num_seqs
        return cap is None or sum(s.num_seqs for s in self.scheduler.running) < cap

    # --- invariants -----------------------------------------------------------------------------
    @invariant()
    def blocks_balance(self) -> None:
        pool = self.manager.pool
        assert pool.num_free + pool.num_used == pool.num_blocks
        tables = [self.manager.block_ids(seq) for seq in self.manager.sequences]
        references = Counter(b for ids in tables for b in ids)
        for b in range(pool.num_blocks):
            assert pool.ref_counts[b] == references[b], (b, pool.ref_counts[b], references[b])
            assert pool.is_free(b) == (references[b] == 0)
        for ids in tables:
            assert len(set(ids)) == len(ids), "a block twice in one table"
        usage = self.manager.usage()
        assert usage.stored_tokens <= usage.held_slots <= usage.capacity and usage.utilisation <= 1
        fills: dict[int, int] = {}                 # the definition: each block in use once, at its fullest
        for table in self.manager.tables.values():
            for block_id, fill in zip(table.block_ids, table.fills):
                fills[block_id] = max(fills.get(block_id, 0), fill)
        assert usage.stored_tokens == sum(fills.values())

    @invariant()
    def every_running_sequence_and_only_they_hold_memory(self) -> None:
        assert set(self.manager.sequences) == set(self.scheduler.running)
        for seq in self.scheduler.running:
            assert seq.status is Status.RUNNING
            assert len(self.manager.block_ids(seq)) == blocks_needed(seq.num_computed_tokens, self.manager.block_size)
            assert self.manager.table(seq).num_tokens == seq.num_computed_tokens <= seq.num_tokens

    @invariant()
    def swapped_sequences_and_only_they_hold_host_blocks(self) -> None:
        if self.swap is None:
            return
        swapped = {s for s in self.scheduler.waiting if s.status is Status.SWAPPED}
        assert set(self.swap.tables) == swapped
        held = [b for host in self.swap.tables.values() for b in host]
        assert len(held) == len(set(held)) == self.swap.pool.num_used
        for seq, host in self.swap.tables.items():   # its count stays on its record: its K/V are kept, only moved
            assert len(host) == blocks_needed(seq.num_computed_tokens, self.manager.block_size) > 0

    @invariant()
    def no_request_is_lost(self) -> None:
        places = Counter(s.seq_id for s in [*self.scheduler.waiting, *self.scheduler.running, *self.finished])
        assert places == Counter(list(self.added)), "a request is lost or in two places"


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None, derandomize=True)


def test_the_machine_ran_at_least_ten_thousand_steps() -> None:
    """Runs after the machine (file order): the invariants above were checked over >= 10k scheduler steps."""
    if not STEPS["steps"]:
        import pytest
        pytest.skip("the state machine did not run in this session (selected alone)")
    assert STEPS["steps"] >= 10_000, STEPS
    assert STEPS["swapped_out"] >= 10 and STEPS["blocks_swapped_in"] >= 20, STEPS   # the swap path ran too (derandomized: 19, 62)
