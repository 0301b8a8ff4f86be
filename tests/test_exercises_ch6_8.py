"""The chapter 6 and 8 graders accept the solutions and reject broken variants."""

from __future__ import annotations

from pagedkv_edu.block_manager import BlockManager
from pagedkv_edu.exercises import ch6, ch8
from pagedkv_edu.exercises.solutions import ch6 as sol6
from pagedkv_edu.exercises.solutions import ch8 as sol8
from pagedkv_edu.scheduler import PagedMemory


def test_can_admit_solution_agrees_with_the_scheduler() -> None:
    for name, tokens, b, free, watermark, running in ch6.ADMIT_CASES:
        manager = BlockManager(free + running, b)
        for i in range(running):
            manager.add_sequence(f"running-{i}", 1)
        assert manager.pool.num_free == free, name
        assert PagedMemory(manager, watermark).can_admit("new", tokens) is sol6.can_admit(tokens, b, free, watermark,
                                                                                             running), name


def test_can_admit_checker(capsys) -> None:
    assert ch6.check_can_admit(sol6.can_admit)
    broken = [
        lambda n, b, f, w, r: n // b + (w if r else 0) <= f,          # rounds down
        lambda n, b, f, w, r: -(-n // b) <= f,                         # no watermark
        lambda n, b, f, w, r: -(-n // b) + w <= f,                     # watermark even when idle
        lambda n, b, f, w, r: -(-n // b) + (w if r else 0) < f,        # off by one
    ]
    for fn in broken:
        assert not ch6.check_can_admit(fn)
    assert "expected" in capsys.readouterr().out


def test_last_block_waste_checker(capsys) -> None:
    assert ch8.check_last_block_waste(sol8.last_block_waste)
    broken = [lambda n, b: n % b, lambda n, b: b - n % b, lambda n, b: (n // b) * b - n, lambda n, b: 1 / 0]
    for fn in broken:
        assert not ch8.check_last_block_waste(fn)
    out = capsys.readouterr().out
    assert "ZeroDivisionError" in out and "expected 7" in out
