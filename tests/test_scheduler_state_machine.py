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
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.engine.model_runner import BlockTableRows
from pagedkv_edu.core.scheduler import Scheduler, Status, seats_of
from pagedkv_edu.core.swap import SwapSpace

STEPS = Counter()   # schedule() calls across the whole run: the test below checks there were enough


@dataclass(eq=False)
class Seq:
    seq_id: str
    prompt: list[int]
    output: list[int] = field(default_factory=list)
    num_seqs: int = 1

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def token_ids(self) -> list[int]:
        return self.prompt + self.output


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
        self.finished: list[Seq] = []
        self.added: list[Seq] = []
        self.next_id = 0

    @rule(length=st.integers(1, 12), alphabet=st.integers(1, 3), data=st.data())
    def add(self, length: int, alphabet: int, data: st.DataObject) -> None:
        prompt = data.draw(st.lists(st.integers(0, alphabet), min_size=length, max_size=length))
        seq = Seq(f"s{self.next_id}", prompt)
        self.next_id += 1
        if self.scheduler.memory.fits_ever(seq.num_tokens):
            self.scheduler.add(seq)
            self.added.append(seq)

    @rule(tokens=st.lists(st.integers(0, 3), min_size=2, max_size=16))
    def steps(self, tokens: list[int]) -> None:
        """A few scheduler steps in a row (each sampling sequence appends the token), all invariants after each."""
        for token in tokens:
            self._step(token)
            self.blocks_balance()
            self.every_running_sequence_and_only_they_hold_memory()
            self.no_request_is_lost()

    def _step(self, token: int) -> None:
        STEPS["steps"] += 1
        running_before = {s.seq_id for s in self.scheduler.running}
        step = self.scheduler.schedule()
        admitted = {s.seq_id for s in step.admitted}
        assert not admitted & {s.seq_id for s in step.preempted}, "a sequence admitted and preempted in one step"
        assert not admitted & running_before
        if self.scheduler.max_num_batched_tokens is not None:
            assert step.num_tokens <= self.scheduler.max_num_batched_tokens
        if self.scheduler.max_num_seqs is not None:
            assert sum(map(seats_of, self.scheduler.running)) <= self.scheduler.max_num_seqs
        live = {b for t in self.manager.tables.values() for b in t.block_ids}
        for src, dst in step.copies:
            assert src != dst and dst in live
        for seq in step.preempted + step.failed:
            self.rows.release(seq.seq_id)
        self.rows.arrange([s.seq.seq_id for s in step.scheduled])
        for row, s in enumerate(step.scheduled):
            assert s.num_new_tokens >= 1 and s.seq_len <= s.seq.num_tokens
            assert self.manager.table(s.seq.seq_id).num_tokens == s.seq_len
            self.rows.append_row(row, s)
            if s.samples:
                s.seq.output.append(token)
        for seq_id in self.rows.order:   # every row the runner holds is its sequence's live table
            assert self.rows.ids(seq_id) == self.manager.block_ids(seq_id), seq_id
        assert self.rows.order[:len(step.scheduled)] == [s.seq.seq_id for s in step.scheduled]   # batch order
        self.finished += step.failed
        STEPS["swapped_out"] += len(step.swapped_out)
        STEPS["blocks_swapped_in"] += len(step.swap_in)

    @precondition(lambda self: any(s.output for s in self.scheduler.running))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from([s for s in self.scheduler.running if s.output]))
        self.scheduler.finish(seq)
        self.rows.release(seq.seq_id)
        self.finished.append(seq)

    @precondition(lambda self: self._room() and any(s.output and self._computed(s) == s.num_tokens - 1
                                                    for s in self.scheduler.running))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from([s for s in self.scheduler.running
                                            if s.output and self._computed(s) == s.num_tokens - 1]))
        child = Seq(f"{parent.seq_id}.{self.next_id}", list(parent.prompt), list(parent.output))
        self.next_id += 1
        self.scheduler.fork(parent, child)
        self.added.append(child)

    def _room(self) -> bool:
        cap = self.scheduler.max_num_seqs
        return cap is None or len(self.scheduler.running) < cap

    def _computed(self, seq: Seq) -> int:
        return self.scheduler.num_computed_tokens(seq)

    # --- invariants -----------------------------------------------------------------------------
    @invariant()
    def blocks_balance(self) -> None:
        pool = self.manager.pool
        assert pool.num_free + pool.num_used == pool.num_blocks
        references = Counter(b for t in self.manager.tables.values() for b in t.block_ids)
        for b in range(pool.num_blocks):
            assert pool.ref_counts[b] == references[b], (b, pool.ref_counts[b], references[b])
            assert pool.is_free(b) == (references[b] == 0)
        for table in self.manager.tables.values():
            assert len(set(table.block_ids)) == len(table.block_ids), "a block twice in one table"
        usage = self.scheduler.memory.usage()
        assert usage.stored_tokens <= usage.held_slots <= usage.capacity and usage.utilisation <= 1
        fills: dict[int, int] = {}                 # the definition: each block in use once, at its fullest
        for table in self.manager.tables.values():
            for block_id, fill in zip(table.block_ids, table.fills):
                fills[block_id] = max(fills.get(block_id, 0), fill)
        assert usage.stored_tokens == sum(fills.values())

    @invariant()
    def every_running_sequence_and_only_they_hold_memory(self) -> None:
        running = {s.seq_id: s for s in self.scheduler.running}
        assert set(self.manager.tables) == set(running)
        for seq_id, seq in running.items():
            assert self.manager.table(seq_id).num_tokens == self._computed(seq) <= seq.num_tokens

    @invariant()
    def swapped_sequences_and_only_they_hold_host_blocks(self) -> None:
        if self.swap is None:
            return
        swapped = {s.seq_id: s for s in self.scheduler.waiting if s.status is Status.SWAPPED}
        assert set(self.swap.tables) == set(swapped)
        held = [b for host, _ in self.swap.tables.values() for b in host]
        assert len(held) == len(set(held)) == self.swap.pool.num_used
        for seq_id, (host, tokens) in self.swap.tables.items():
            assert tokens == swapped[seq_id].num_computed_tokens and len(host) == -(-tokens // self.manager.block_size)

    @invariant()
    def no_request_is_lost(self) -> None:
        places = Counter(s.seq_id for s in [*self.scheduler.waiting, *self.scheduler.running, *self.finished])
        assert places == Counter(s.seq_id for s in self.added), "a request is lost or in two places"


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


def test_the_machine_ran_at_least_ten_thousand_steps() -> None:
    """Runs after the machine (file order): the invariants above were checked over >= 10k scheduler steps."""
    if not STEPS["steps"]:
        import pytest
        pytest.skip("the state machine did not run in this session (selected alone)")
    assert STEPS["steps"] >= 10_000, STEPS
    assert STEPS["swapped_out"] >= 20 and STEPS["blocks_swapped_in"] >= 20, STEPS   # the swap path ran too
