"""Chapter 7's graders accept the solutions and reject the usual wrong answers, with a useful diff."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from pagedkv_edu.block_manager import BlockManager
from pagedkv_edu.exercises.ch7 import COW_CASES, check_append_with_cow, check_cached_prefix_blocks
from pagedkv_edu.exercises.solutions.ch7 import append_with_cow, cached_prefix_blocks


# --- the solutions agree with the package ----------------------------------------------------
def test_append_with_cow_agrees_with_the_block_manager() -> None:
    """The first case through BlockManager.fork / append_tokens / take_copies gives the same story."""
    m = BlockManager(6, 4)
    m.add_sequence("parent", 6)                       # blocks 0, 1: the case's start
    m.fork("parent", "child")
    tables, refs, free = {"parent": [0, 1], "child": [0, 1]}, [2, 2, 0, 0, 0, 0], [2, 3, 4, 5]
    lengths = {"parent": 6, "child": 6}
    for seq in COW_CASES[0].appends:
        slot, copy = append_with_cow(tables[seq], lengths[seq], 4, refs, free)
        m.append_tokens(seq)
        lengths[seq] += 1
        assert m.take_copies() == ([copy] if copy else [])
        assert tables[seq] == m.table(seq).block_ids and refs == m.pool.ref_counts
        assert slot == m.table(seq).slot(lengths[seq] - 1)


def test_cached_prefix_blocks_agrees_with_the_prefix_cache() -> None:
    m = BlockManager(16, 4, enable_prefix_caching=True)
    cached = list(range(11, 21)) + [40, 41]
    m.add_sequence("a", len(cached), cached)
    m.mark_computed("a", cached)
    cache = {tuple(cached[:end]): m.table("a").block_ids[end // 4 - 1] for end in (4, 8, 12)}
    for prompt in (cached, cached[:8], cached[:9], list(range(11, 21)) + [30], [11, 12, 13, 0, 0]):
        assert cached_prefix_blocks(prompt, 4, cache) == list(m.prefix_cache.lookup(prompt).block_ids)


# --- the checkers -------------------------------------------------------------------------------
def test_checkers_accept_the_solutions(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_with_cow(append_with_cow) is True
    assert check_cached_prefix_blocks(cached_prefix_blocks) is True
    out = capsys.readouterr().out
    assert "✓ append_with_cow: passed" in out and "✓ cached_prefix_blocks: passed" in out


def _never_copies(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if n % b == 0:
        t.append(free.pop(0))
        refs[t[-1]] = 1
    return t[-1] * b + n % b, None


def _copies_full_blocks_too(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if t and refs[t[-1]] > 1:
        shared, own = t[-1], free.pop(0)
        refs[shared] -= 1
        refs[own] = 1
        t[-1] = own
        if n % b == 0:
            t.append(free.pop(0))
            refs[t[-1]] = 1
        return t[-1] * b + n % b, (shared, own)
    return _never_copies(t, n, b, refs, free)


def _keeps_the_shared_reference(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if n % b and refs[t[-1]] > 1:
        shared, own = t[-1], free.pop(0)
        refs[own] = 1
        t[-1] = own
        return own * b + n % b, (shared, own)
    return _never_copies(t, n, b, refs, free)


def _writes_into_the_shared_block(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    shared = t[-1] if t else None
    slot, copy = append_with_cow(t, n, b, refs, free)
    return (shared * b + n % b, copy) if copy else (slot, copy)


def _copies_unshared_blocks(t: list[int], n: int, b: int, refs: list[int], free: list[int]):
    if n % b:
        shared, own = t[-1], free.pop(0)
        refs[shared] -= 1
        refs[own] = 1
        t[-1] = own
        return own * b + n % b, (shared, own)
    return _never_copies(t, n, b, refs, free)


@pytest.mark.parametrize("broken", [_never_copies, _copies_full_blocks_too, _keeps_the_shared_reference,
                                    _writes_into_the_shared_block, _copies_unshared_blocks])
def test_cow_checker_rejects_broken_variants(broken, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_append_with_cow(broken) is False
    assert capsys.readouterr().out.startswith("✗ append_with_cow: failed")


def test_cow_checker_diff_explains_the_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    check_append_with_cow(_never_copies)
    out = capsys.readouterr().out
    assert "child appends token 6 to table [0, 1], ref counts [2, 2, 0, 0, 0, 0], free list [2, 3, 4, 5]:" in out
    assert "copy: expected (1, 2), got None" in out
    assert "slot: expected 10, got 6  (block 1 is shared: the other sequences would see this token)" in out
    check_append_with_cow(_keeps_the_shared_reference)
    assert "reference counts: expected [2, 1, 1, 0, 0, 0], got [2, 2, 1, 0, 0, 0] (blocks [1] differ)" in \
        capsys.readouterr().out
    check_append_with_cow(_copies_full_blocks_too)
    assert "nothing needs copying" in capsys.readouterr().out


def test_cow_checker_reports_an_exception_once(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(*args):
        raise NotImplementedError("your turn")

    assert check_append_with_cow(not_yet) is False
    assert capsys.readouterr().out.count("raised NotImplementedError: your turn") == 1


def _no_cap(tokens: Sequence[int], b: int, cache: Mapping[tuple[int, ...], int]) -> list[int]:
    blocks = []
    for end in range(b, len(tokens) + 1, b):
        if tuple(tokens[:end]) not in cache:
            break
        blocks.append(cache[tuple(tokens[:end])])
    return blocks


def _skips_gaps(tokens: Sequence[int], b: int, cache: Mapping[tuple[int, ...], int]) -> list[int]:
    return [cache[tuple(tokens[:end])] for end in range(b, len(tokens), b) if tuple(tokens[:end]) in cache]


def _block_tokens_only(tokens: Sequence[int], b: int, cache: Mapping[tuple[int, ...], int]) -> list[int]:
    by_block = {k[-b:]: v for k, v in cache.items()}
    blocks = []
    for end in range(b, len(tokens), b):
        if tuple(tokens[end - b:end]) not in by_block:
            break
        blocks.append(by_block[tuple(tokens[end - b:end])])
    return blocks


@pytest.mark.parametrize("broken", [_no_cap, _skips_gaps, _block_tokens_only])
def test_prefix_checker_rejects_broken_variants(broken, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_cached_prefix_blocks(broken) is False
    assert capsys.readouterr().out.startswith("✗ cached_prefix_blocks: failed")


def test_prefix_checker_diff_explains_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    check_cached_prefix_blocks(_no_cap)
    out = capsys.readouterr().out
    assert "the whole prompt is cached" in out and "expected blocks [6], got [6, 2]" in out
    assert "8 of 8 tokens hit: nothing is left to compute the logits from" in out
    check_cached_prefix_blocks(_block_tokens_only)
    assert "expected blocks [6], got [6, 3]  (a block is usable only if every block before it" in capsys.readouterr().out
