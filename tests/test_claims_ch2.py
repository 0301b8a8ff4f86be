"""Chapter 2's claims beyond its check cell: the edge cases and the consistency of the figures it prints.

The notebook asserts the chapter's claims on its own run; these recompute everything through the
package (the 50 consultants, chapter 1's budget) and pin what the check cell leaves out: the block
tables' later steps, the waste bound at other block sizes, the gain as budget arithmetic, and the
printed table the ledger quotes.
"""

from __future__ import annotations

import pytest

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.block_table import BlockTable, blocks_needed
from pagedkv_edu.core.request import Request
from pagedkv_edu.sim.simulate import simulate
from pagedkv_edu.viz.policy_table import ROWS, policy_table
from pagedkv_edu.viz.reservation_gain import reservation_gain
from pagedkv_edu.workload import MAX_SEQ_LEN, copilot50

BUDGET = 10 * MAX_SEQ_LEN


@pytest.fixture(scope="module")
def requests():
    return copilot50(seed=0)


@pytest.fixture(scope="module")
def runs(requests):
    return {policy: simulate(requests, policy, kv_budget_tokens=BUDGET, block_size=16)
            for policy in ("contiguous", "paged")}


def test_the_41_token_table_grows_into_its_last_block_then_takes_the_front_of_the_queue() -> None:
    pool = BlockPool.from_free_order(num_blocks=16, block_size=16, free_order=[7, 3, 12, 0, 14])
    seq = BlockTable(block_size=16)
    seq.append_tokens(pool, 41)
    assert (seq.block_ids, seq.fills, seq.waste) == ([7, 3, 12], [16, 16, 9], 7)
    assert seq.append_tokens(pool, 1) == [] and seq.slot(41) == 12 * 16 + 9
    assert seq.append_tokens(pool, 6) == [] and seq.fills == [16, 16, 16]   # positions 42-47 fill block 12
    assert seq.append_tokens(pool, 1) == [0]                                # position 48: the front of the queue
    assert seq.release(pool) == [0, 12, 3, 7] and pool.free_ids() == [14, 0, 12, 3, 7]   # last block first


def test_the_block_size_4_walk_through_allocates_only_when_the_last_block_is_full() -> None:
    manager = BlockManager.over(BlockPool.from_free_order(num_blocks=8, block_size=4,
                                                          free_order=[7, 1, 3, 0, 2, 4, 5, 6]))
    seq = Request("prompt", None, num_prompt_tokens=7)
    assert manager.admit(seq, 7) == [7, 1]
    seq.num_computed_tokens = 7
    added = []
    for _ in range(2):
        seq.output_token_ids.append(0)
        added.append(manager.grow(seq, 1))
        seq.num_computed_tokens += 1
    assert added == [[], [3]] and manager.table(seq).block_ids == [7, 1, 3]
    slots = manager.table(seq).slot_mapping()
    assert slots == [28, 29, 30, 31, 4, 5, 6, 7, 12]                          # one-to-one, all in the table's blocks
    assert {s // 4 for s in slots} == {7, 1, 3}


@pytest.mark.parametrize("n, blocks, empty", [(1, 1, 15), (16, 1, 0), (17, 2, 15), (825, 52, 7)])
def test_a_sequence_wastes_under_one_block(n: int, blocks: int, empty: int) -> None:
    assert (blocks_needed(n, 16), blocks_needed(n, 16) * 16 - n) == (blocks, empty)


@pytest.mark.parametrize("block_size", [1, 8, 32])
def test_paging_leaves_only_the_last_blocks_tail_at_any_block_size(requests, block_size: int) -> None:
    run = simulate(requests, "paged", kv_budget_tokens=BUDGET, block_size=block_size)
    waste = run.waste_fractions
    assert waste["over_reserved"] == 0 and waste["external"] == 0
    assert run.max_waste_per_sequence() == block_size - 1                   # the worst tail, and never more
    assert abs(sum(waste.values()) - (1 - run.utilisation)) < 1e-12
    assert (waste["internal"] == 0) == (block_size == 1)


def test_the_finished_requests_tails_reach_but_never_pass_block_size_minus_one(requests) -> None:
    tails = [blocks_needed(r.final_len, 16) * 16 - r.final_len for r in requests]
    assert max(tails) == 15 and min(tails) >= 0


def test_paging_holds_more_requests_and_the_gain_is_budget_arithmetic(requests, runs) -> None:
    paged, contiguous = runs["paged"], runs["contiguous"]
    assert paged.saturated_concurrency > contiguous.saturated_concurrency
    sweep = reservation_gain(requests, paged, BUDGET, [2048, 4096, 8192])
    assert sweep.paged_held == paged.saturated_concurrency
    assert sweep.contiguous_held == {2048: 10, 4096: 5, 8192: 2}             # floor(budget / reservation)
    assert sweep.contiguous_held[2048] == contiguous.saturated_concurrency    # the 2,048 point is the table's run
    for length, gain in sweep.gains.items():
        assert abs(gain - paged.saturated_concurrency / (BUDGET // length)) < 1e-9
    assert [f"{sweep.gains[L]:.1f}" for L in (2048, 4096, 8192)] == ["2.0", "4.1", "10.2"]


def test_the_sweep_report_prints_one_line_per_reservation(requests, runs) -> None:
    sweep = reservation_gain(requests, runs["paged"], BUDGET, [2048, 8192])
    assert sweep.report().splitlines() == [
        "max_seq_len 2,048: 10 reservations fit, contiguous holds 10.0, paged 20.4: 2.0x",
        "max_seq_len 8,192:  2 reservations fit, contiguous holds  2.0, paged 20.4: 10.2x",
    ]


def test_nobody_queues_would_need_more_than_the_budget(requests, runs) -> None:
    assert sum(r.final_len for r in requests) == 56_625 > BUDGET
    assert runs["paged"].max_queue_delay > 0 and runs["contiguous"].max_queue_delay > 0


def test_the_policy_table_prints_the_rows_the_ledger_quotes(runs) -> None:
    lines = policy_table(runs).splitlines()
    assert len(lines) == 1 + len(ROWS)
    assert lines[0] == " " * 26 + "  contiguous" + "       paged"
    assert "utilisation                      48.0%       99.2%" in lines
    assert "waste: external                   0.0%        0.0%" in lines
    assert "running while others wait         10.0        20.4" in lines
    assert "steps to serve all 50             1874        1117" in lines


def test_the_policy_table_has_a_column_per_run_in_the_given_order(runs) -> None:
    swapped = policy_table({"paged": runs["paged"], "contiguous": runs["contiguous"]}).splitlines()
    assert swapped[0].split() == ["paged", "contiguous"]
    assert swapped[1].split() == ["utilisation", "99.2%", "48.0%"]
