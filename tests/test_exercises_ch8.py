"""Chapter 8's graders (hash chain, checked lookup, free-queue order) accept right answers in any style and
reject the usual wrong ones, hidden cases included; the solutions agree with the package."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.request import Request
from pagedkv_edu.exercises import ch8
from pagedkv_edu.exercises.solutions import ch8 as sol


def _ref(case: ch8.LookupCase) -> list[int]:
    return sol.cached_prefix_blocks(case.token_ids, case.block_size, ch8.HASHES[case.hash_name], dict(case.table),
                                    dict(case.holds))


# --- the solutions agree with the package ---------------------------------------------------------
def test_the_lookup_agrees_with_the_prefix_cache() -> None:
    m = BlockManager(16, 4, enable_prefix_caching=True)
    cached = list(range(11, 21)) + [40, 41]
    a = Request("a", cached)
    m.admit(a, len(cached))
    a.num_computed_tokens = len(cached)
    blocks = m.block_ids(a)
    table, holds, parent = {}, {}, None
    for i, h in enumerate(sol.block_hashes(cached, 4, ch8.strong_hash)):
        table[h], holds[blocks[i]] = blocks[i], (parent, tuple(cached[i * 4:(i + 1) * 4]))
        parent = h
    for prompt in (cached, cached[:8], cached[:9], list(range(11, 21)) + [30], [11, 12, 13, 0, 0]):
        assert sol.cached_prefix_blocks(prompt, 4, ch8.strong_hash, table, holds) == \
            list(m.prefix_cache.lookup(prompt, m.prefix_cache.chain(prompt)).block_ids)


def test_free_blocks_and_touch_agree_with_the_block_pool() -> None:
    pool = BlockPool(9, 4)
    cached = {1, 4, 6}
    pool.is_cached = cached.__contains__
    queue, refs = list(range(9)), [0] * 9
    held = pool.allocate(7)
    queue, refs = queue[7:], [1] * 7 + [0, 0]
    pool.incref(4)
    refs[4] += 1
    for blocks in ([6, 5, 4, 3], [2, 1, 0]):
        pool.free_all(blocks)
        sol.free_blocks(queue, refs, blocks, cached)
        assert pool.free_ids() == queue and pool.ref_counts == refs
    for block in (1, 4):
        pool.touch(block)
        sol.touch(queue, refs, block)
        assert pool.free_ids() == queue and pool.ref_counts == refs
    assert held == list(range(7))


def test_hidden_cases_cover_the_edges() -> None:
    assert {3, 5, 6, 12} <= {c.block_size for c in ch8.HIDDEN_CHAIN_CASES}
    assert any(len(c.token_ids) == c.block_size for c in ch8.HIDDEN_CHAIN_CASES)
    hidden = ch8.HIDDEN_LOOKUP_CASES
    assert {3, 5, 6, 12} <= {c.block_size for c in hidden} and {"weak", "strong"} <= {c.hash_name for c in hidden}
    assert sum(bool(_ref(c)) for c in hidden) > 50                                   # many hit
    capped = [c for c in hidden if len(c.token_ids) % c.block_size == 0 and len(c.token_ids) > c.block_size
              and len(_ref(c)) == len(c.token_ids) // c.block_size - 1]
    assert capped                                                                    # whole prompt cached
    assert sum(_no_check(list(c.token_ids), c.block_size, ch8.HASHES[c.hash_name], dict(c.table), dict(c.holds))
               != _ref(c) for c in hidden) > 10                                      # stale or colliding entries
    kinds = {kind for c in ch8.HIDDEN_QUEUE_CASES for kind, _ in c.ops}
    assert kinds == {"alloc", "free", "share", "cache", "hit"}


def test_try_case_returns_inputs_and_the_expected_output() -> None:
    case = ch8.try_case("lookup", 4)
    assert "collision" in case["case"] and case["expected"] == []
    assert sol.cached_prefix_blocks(case["token_ids"], case["block_size"], case["hash_fn"], case["table"],
                                    case["holds"]) == case["expected"]
    assert len(ch8.try_case("hashes")["expected"]) == 2
    mine = ch8.try_case("hashes", 0, _chain_no_parent)
    assert mine["got"] != mine["expected"] and len(mine["got"]) == 2
    queue = ch8.try_case("queue", 0, _append_both, sol.touch)
    assert queue["expected"][-1][1] == [2, 3, 4, 5, 6, 7, 1, 0] and queue["got"][-1][1] == [3, 4, 5, 6, 7, 2, 1, 0]
    with pytest.raises(ValueError, match="got 'nope'"):
        ch8.try_case("nope")


# --- the hash chain ---------------------------------------------------------------------------------
def _chain_no_parent(t, b, fn):
    return [fn(None, tuple(t[e - b:e])) for e in range(b, len(t) + 1, b)]


def _chain_partial_too(t, b, fn):
    hashes, parent = [], None
    for s in range(0, len(t), b):
        parent = fn(parent, tuple(t[s:s + b]))
        hashes.append(parent)
    return hashes


def _chain_drops_last(t, b, fn):
    return sol.block_hashes(t[:-1], b, fn)


def _chain_root_zero(t, b, fn):
    hashes, parent = [], 0
    for e in range(b, len(t) + 1, b):
        parent = fn(parent, tuple(t[e - b:e]))
        hashes.append(parent)
    return hashes


def _chain_block_four(t, b, fn):
    return sol.block_hashes(t, 4, fn)


def _chain_parent_tokens(t, b, fn):
    hashes, parent = [], None
    for e in range(b, len(t) + 1, b):
        hashes.append(fn(parent, tuple(t[e - b:e])))
        parent = tuple(t[e - b:e])
    return hashes


CHAIN_WRONG = {f.__name__: f for f in (_chain_no_parent, _chain_partial_too, _chain_drops_last, _chain_root_zero,
                                       _chain_block_four, _chain_parent_tokens)}


def _chain_while(t, b, fn):
    out, start = [], 0
    while start + b <= len(t):
        out.append(fn(out[-1] if out else None, list(t[start:start + b])))   # a list: values, not spellings
        start += b
    return tuple(out)


def _chain_numpy(t, b, fn):
    full = np.asarray(t[:len(t) // b * b], dtype=np.int64).reshape(-1, b)
    out, parent = [], None
    for row in full:
        parent = fn(parent, row.tolist())
        out.append(parent)
    return out


CHAIN_RIGHT = {"reference": sol.block_hashes, "while": _chain_while, "numpy": _chain_numpy}


@pytest.mark.parametrize("name", CHAIN_RIGHT)
def test_chain_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_block_hashes(CHAIN_RIGHT[name]) is True
    assert "✓ block_hashes (雜湊鏈): passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHAIN_WRONG)
def test_chain_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_block_hashes(CHAIN_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ block_hashes (雜湊鏈): failed")


def test_chain_messages(capsys: pytest.CaptureFixture[str]) -> None:
    for wrong, says in ((_chain_no_parent, "each hash must include its parent's hash"),
                        (_chain_partial_too, "a partly filled last block has no hash"),
                        (_chain_root_zero, "the first block's parent hash is None"),
                        (_chain_drops_last, "the last full block is missing")):
        ch8.check_block_hashes(wrong)
        assert says in capsys.readouterr().out, wrong.__name__


def test_chain_stub(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(t, b, fn):
        raise NotImplementedError("your turn")

    assert ch8.check_block_hashes(not_yet) is False
    out = capsys.readouterr().out
    assert out.startswith("○ block_hashes (雜湊鏈): not solved yet") and "expected" not in out


# --- the lookup --------------------------------------------------------------------------------------
def _no_check(t, b, fn, table, holds):
    out, parent = [], None
    for e in range(b, len(t), b):
        h = fn(parent, tuple(t[e - b:e]))
        if h not in table:
            break
        out.append(table[h])
        parent = h
    return out


def _tokens_only(t, b, fn, table, holds):
    """nano-vllm's check: the block's tokens, not what came before them."""
    out, parent = [], None
    for e in range(b, len(t), b):
        h, tokens = fn(parent, tuple(t[e - b:e])), tuple(t[e - b:e])
        if h not in table or holds.get(table[h], (None, ()))[1] != tokens:
            break
        out.append(table[h])
        parent = h
    return out


def _no_cap(t, b, fn, table, holds):
    return sol.cached_prefix_blocks(list(t) + [0], b, fn, table, holds)[:len(t) // b]


def _skips_gaps(t, b, fn, table, holds):
    out, parent = [], None
    for e in range(b, len(t), b):
        key = (parent, tuple(t[e - b:e]))
        h = fn(*key)
        if h in table and holds.get(table[h]) == key:
            out.append(table[h])
        parent = h
    return out


def _lookup_answer_key(t, b, fn, table, holds):
    return {(c.token_ids, c.block_size): _ref(c) for c in ch8.LOOKUP_CASES}.get((tuple(t), b), [])


def _cap_too_strict(t, b, fn, table, holds):
    return sol.cached_prefix_blocks(t[:-1], b, fn, table, holds)


LOOKUP_WRONG = {f.__name__: f for f in (_no_check, _tokens_only, _no_cap, _skips_gaps, _lookup_answer_key,
                                        _cap_too_strict)}


def _lookup_while(t, b, fn, table, holds):
    found, parent, end = [], None, b
    while end < len(t):
        key = (parent, tuple(t[end - b:end]))
        block = table.get(fn(*key), -1)
        if block < 0 or holds.get(block) != key:
            return np.array(found, dtype=np.int64)
        found.append(block)
        parent, end = fn(*key), end + b
    return np.array(found, dtype=np.int64)


def _lookup_torch(t, b, fn, table, holds):
    return torch.tensor(sol.cached_prefix_blocks(t, b, fn, table, holds), dtype=torch.long)


def _lookup_separate_checks(t, b, fn, table, holds):
    out, parent = [], None
    for i in range((len(t) - 1) // b):
        tokens = tuple(t[i * b:(i + 1) * b])
        h = fn(parent, tokens)
        block = table.get(h)
        if block is None or block not in holds:
            break
        held_parent, held_tokens = holds[block]
        if held_tokens != tokens or held_parent != parent:
            break
        out.append(block)
        parent = h
    return out


LOOKUP_RIGHT = {"reference": sol.cached_prefix_blocks, "while/numpy": _lookup_while, "torch": _lookup_torch,
                "separate checks": _lookup_separate_checks}


@pytest.mark.parametrize("name", LOOKUP_RIGHT)
def test_lookup_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_cached_prefix_blocks(LOOKUP_RIGHT[name]) is True
    assert "✓ cached_prefix_blocks (最長已快取前綴): passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", LOOKUP_WRONG)
def test_lookup_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_cached_prefix_blocks(LOOKUP_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ cached_prefix_blocks (最長已快取前綴): failed") and out.count("expected blocks") == 1


def test_lookup_hidden_cases_alone_reject_the_unchecked_lookup() -> None:
    assert any(_no_check(list(c.token_ids), c.block_size, ch8.HASHES[c.hash_name], dict(c.table), dict(c.holds))
               != _ref(c) for c in ch8.HIDDEN_LOOKUP_CASES if c.hash_name == "strong")   # stale, not only collisions


def test_lookup_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch8.check_cached_prefix_blocks(_no_check)
    out = capsys.readouterr().out
    assert "handed out again" in out and "expected blocks [6], got [6, 2]" in out
    ch8.check_cached_prefix_blocks(_tokens_only)
    assert "but after another prefix" in capsys.readouterr().out
    ch8.check_cached_prefix_blocks(_no_cap)
    assert "nothing would be left to compute the logits from" in capsys.readouterr().out


def test_lookup_stub(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(*args):
        raise NotImplementedError("your turn")

    assert ch8.check_cached_prefix_blocks(not_yet) is False
    out = capsys.readouterr().out
    assert out.startswith("○ cached_prefix_blocks (最長已快取前綴): not solved yet") and "expected" not in out


# --- the free queue ------------------------------------------------------------------------------------
def _append_both(q, refs, blocks, cached):
    for x in blocks:
        refs[x] -= 1
        if refs[x] == 0:
            q.append(x)


def _prepend_one_at_a_time(q, refs, blocks, cached):
    for x in blocks:
        refs[x] -= 1
        if refs[x] == 0:
            (q.append(x) if x in cached else q.insert(0, x))


def _swapped(q, refs, blocks, cached):
    sol.free_blocks(q, refs, blocks, {x for x in range(len(refs)) if x not in cached})


def _ignores_refs(q, refs, blocks, cached):
    for x in blocks:
        refs[x] = 0
    fresh = [x for x in blocks if x not in cached]
    q[:0] = fresh
    q.extend(x for x in blocks if x in cached)


def _touch_keeps_in_queue(q, refs, block):
    refs[block] += 1


FREE_WRONG = {"append both (older vLLM)": (_append_both, sol.touch),
              "prepend one at a time": (_prepend_one_at_a_time, sol.touch),
              "cached in front": (_swapped, sol.touch),
              "ignores reference counts": (_ignores_refs, sol.touch),
              "a hit stays in the queue": (sol.free_blocks, _touch_keeps_in_queue)}


def _free_sorted_passes(q, refs, blocks, cached):
    freed = []
    for x in blocks:
        refs[x] -= 1
        if not refs[x]:
            freed.append(x)
    q[:] = [x for x in freed if x not in cached] + q + [x for x in freed if x in cached]


def _touch_by_index(q, refs, block):
    if block in q:
        del q[q.index(block)]
    refs[block] = refs[block] + 1


FREE_RIGHT = {"reference": (sol.free_blocks, sol.touch), "rebuilt list": (_free_sorted_passes, _touch_by_index)}


@pytest.mark.parametrize("name", FREE_RIGHT)
def test_free_queue_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_free_queue(*FREE_RIGHT[name]) is True
    assert "✓ free queue order (空閒佇列的順序): passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", FREE_WRONG)
def test_free_queue_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_free_queue(*FREE_WRONG[name]) is False
    assert capsys.readouterr().out.startswith("✗ free queue order (空閒佇列的順序): failed")


def test_free_queue_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch8.check_free_queue(_append_both, sol.touch)
    out = capsys.readouterr().out
    assert "free_blocks(free_queue=[3, 4, 5, 6, 7], ref_counts=[1, 1, 1, 0, 0, 0, 0, 0], blocks=[2, 1, 0]" in out
    assert "expected [2, 3, 4, 5, 6, 7, 1, 0], got [3, 4, 5, 6, 7, 2, 1, 0]  (the older vLLM order" in out
    ch8.check_free_queue(_prepend_one_at_a_time, sol.touch)
    assert "prepending one block at a time reverses them" in capsys.readouterr().out
    ch8.check_free_queue(sol.free_blocks, _touch_keeps_in_queue)
    assert "a hit must take the block out of the free queue" in capsys.readouterr().out


def test_free_queue_stub(capsys: pytest.CaptureFixture[str]) -> None:
    def not_yet(*args):
        raise NotImplementedError("your turn")

    assert ch8.check_free_queue(not_yet, not_yet) is False
    out = capsys.readouterr().out
    assert out.startswith("○ free queue order (空閒佇列的順序): not solved yet") and "expected" not in out
