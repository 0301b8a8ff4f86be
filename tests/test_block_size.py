"""block_size.sweep: the table shares count what the book's decode kernel reads (chapter 9)."""

from __future__ import annotations

import pytest

from pagedkv_edu.sim.block_size import sweep
from pagedkv_edu.workload import Request

REQS = [Request(i, 40 + 7 * i, 30 + 5 * i) for i in range(6)]


def test_table_shares_count_one_load_per_position_per_program() -> None:
    rows = sweep(REQS, (1, 4, 16), kv_budget_tokens=1024)
    # As issued: 4 bytes of table per 256 bytes of K/V (64 dims x 2 bytes x K and V), at any block size.
    assert all(abs(r.table_load_share - 4 / 260) < 1e-12 for r in rows)
    # Cached repeats: at B = 1 every position is its own entry, so both counts agree; then 1 / B.
    assert abs(rows[0].table_bytes_share - rows[0].table_load_share) < 1e-3
    assert rows[0].table_bytes_share > rows[1].table_bytes_share > rows[2].table_bytes_share


def test_programs_must_divide_the_kv_bytes() -> None:
    with pytest.raises(ValueError, match="kv_bytes_per_token=1000 is not a multiple of programs_per_token=128"):
        sweep(REQS, (16,), kv_budget_tokens=1024, kv_bytes_per_token=1000)

