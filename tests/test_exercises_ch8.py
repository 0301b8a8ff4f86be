"""Chapter 8's graders (hash chain, checked lookup, free-queue order) accept right answers in any style and
reject the usual wrong ones, hidden cases included; the solutions agree with the package; saved as the reader's
``my_engine/prefix_cache.py`` they are the engine's prefix cache, with the shipped cache's hits, and a broken
function inside the engine is stopped by name."""

from __future__ import annotations

import random
import shutil
import types
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.prefix_cache import PrefixCache
from pagedkv_edu.core.request import Request, SamplingParams
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.guards import PartError
from pagedkv_edu.exercises import ch8, my_engine
from pagedkv_edu.exercises.ch8_cache import FUNCTIONS, ReaderBlockPool, ReaderFunctions, ReaderPrefixCache
from pagedkv_edu.exercises.solutions import ch8 as sol
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.sim.simulate import SimResult, simulate
from pagedkv_edu.workload import MAX_SEQ_LEN, copilot50
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


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


def _raises(*args):
    return args[99]


def _stub(*args):
    raise NotImplementedError("your turn")


@pytest.mark.parametrize("name", [*CHAIN_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_chain_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_block_hashes({**CHAIN_WRONG, "raises": _raises, "stub": _stub}[name]) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ block_hashes (雜湊鏈)：未通過", "○ block_hashes (雜湊鏈)：尚未作答")), out
    assert untranslated(out) == []


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


@pytest.mark.parametrize("name", [*LOOKUP_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_lookup_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_cached_prefix_blocks({**LOOKUP_WRONG, "raises": _raises, "stub": _stub}[name]) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ cached_prefix_blocks (最長已快取前綴)：未通過",
                           "○ cached_prefix_blocks (最長已快取前綴)：尚未作答")), out
    assert untranslated(out) == []


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


@pytest.mark.parametrize("name", [*FREE_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_free_queue_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch8.check_free_queue(*{**FREE_WRONG, "raises": (_raises, _raises), "stub": (_stub, _stub)}[name]) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ free_blocks 與 touch（空閒佇列的順序）：未通過",
                           "○ free_blocks 與 touch（空閒佇列的順序）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_the_hints_read_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    ch8.check_block_hashes(_chain_partial_too)
    assert "（未填滿的最後一個區塊沒有雜湊：10 個 token 填滿 2 個大小為 4 的區塊）" in capsys.readouterr().out
    ch8.check_cached_prefix_blocks(_no_check)
    out = capsys.readouterr().out
    assert "強雜湊，table 有 2 個項目" in out and "應為區塊 [6]，得到 [6, 2]（table 指向區塊 2，但它裝的是 token" in out
    ch8.check_free_queue(_append_both, sol.touch)
    assert "得到 [3, 4, 5, 6, 7, 2, 1, 0]（這是較舊的 vLLM 順序" in capsys.readouterr().out
    assert ch8.try_case("lookup", 4)["case"].startswith("弱雜湊：")


# --- the three as the engine's prefix cache (my_engine/prefix_cache.py) ---------------------------------
CONSULTANTS = copilot50(seed=0)


def _consultants(block_manager: Any = BlockManager) -> SimResult:
    """The chapter's 50-consultant run (section 2) with prefix caching, the memory built by ``block_manager``."""
    return simulate(CONSULTANTS, "paged", 10 * MAX_SEQ_LEN, max_seq_len=MAX_SEQ_LEN, enable_prefix_caching=True,
                    block_manager=block_manager)


@pytest.fixture(scope="module")
def shipped_consultants() -> SimResult:
    return _consultants()


def _saved(tmp_path: Path, source: str = "") -> Path:
    """The solutions saved as a reader's ``prefix_cache.py``, with ``source`` appended (a redefinition wins)."""
    path = tmp_path / "prefix_cache.py"
    shutil.copy(sol.__file__, path)
    path.write_text(path.read_text() + source)
    return path


def _functions(**broken: Any) -> ReaderFunctions:
    """The solutions as the engine's prefix cache, with the functions in ``broken`` replaced."""
    module = types.SimpleNamespace(**{name: getattr(sol, name) for name in FUNCTIONS + ("touch",)})
    module.__dict__.update(broken)
    return ReaderFunctions.of(module, "your prefix cache (test)")


def test_the_solutions_saved_as_the_readers_file_pass_and_run_as_the_engines_prefix_cache(
        tmp_path: Path, shipped_consultants: SimResult, capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path)
    assert ch8.check_prefix_cache(path) is True
    out = capsys.readouterr().out
    assert out.count("✓") == 4 and "load_parts() now runs it" in out and my_engine.why_not_passed(path, "8") is None
    parts = my_engine.load_parts(tmp_path, quiet=True)
    assert "prefix_cache" in parts.card.yours and parts.prefix_cache is not None
    memory = parts.memory(64, 16, MAX_SEQ_LEN, enable_prefix_caching=True)
    assert isinstance(memory.prefix_cache, ReaderPrefixCache) and isinstance(memory.pool, ReaderBlockPool)
    mine = _consultants(parts.memory)
    assert mine.tokens == shipped_consultants.tokens and mine.tokens.prefix_hit_tokens == 49 * 192   # token for token
    assert mine.evictions == shipped_consultants.evictions > 0 and mine.preemptions == shipped_consultants.preemptions


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random").model


def test_the_composed_cache_serves_a_model_as_the_shipped_one(tiny) -> None:
    rng = random.Random(8)
    vocab = tiny.config.vocab_size
    system = [rng.randrange(100, vocab) for _ in range(9)]    # two full blocks of 4 and a token: shared
    prompts = [system + [rng.randrange(100, vocab) for _ in range(rng.randint(2, 7))] for _ in range(8)]
    settings = dict(kv_budget_tokens=96, block_size=4, max_seq_len=64, watermark=0.0, max_num_batched_tokens=24)

    def serve(engine: LLMEngine) -> dict[int, list[int]]:
        for prompt in prompts:
            engine.add_request(prompt, SamplingParams(max_tokens=8, ignore_eos=True))
        out = {}
        while engine.has_unfinished:
            for o in engine.step():
                out[o.request_id] = o.token_ids
        return out

    shipped = LLMEngine(tiny, enable_prefix_caching=True, **settings)
    mine = LLMEngine(tiny, memory=_functions().memory(24, 4, 64, enable_prefix_caching=True), **settings)
    assert serve(mine) == serve(shipped)
    assert mine.scheduler.counts == shipped.scheduler.counts and shipped.scheduler.counts.prefix_hit_tokens >= 7 * 8
    assert mine.scheduler.num_preemptions == shipped.scheduler.num_preemptions > 0
    assert mine.memory.prefix_cache.num_evictions == shipped.memory.prefix_cache.num_evictions > 0
    assert isinstance(shipped.memory.prefix_cache, PrefixCache)


APPEND_BOTH = """

def free_blocks(free_queue, ref_counts, blocks, cached):
    \"\"\"The older vLLM order: every freed block joins the back, cached or not.\"\"\"
    for block in blocks:
        ref_counts[block] -= 1
        if ref_counts[block] == 0:
            free_queue.append(block)
"""


def test_a_wrong_free_order_changes_the_evictions_and_the_grader_catches_it(
        tmp_path: Path, shipped_consultants: SimResult, capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(tmp_path, APPEND_BOTH)
    assert ch8.check_prefix_cache(path) is False
    out = capsys.readouterr().out
    assert "✗ free queue order (空閒佇列的順序): failed" in out and "the older vLLM order" in out
    assert "has not passed chapter 8's grader" in my_engine.why_not_passed(path, "8")
    assert my_engine.load_parts(tmp_path, quiet=True).prefix_cache is None             # the shipped cache runs
    appended = _consultants(ReaderFunctions.of(my_engine.load_file(path)).memory)      # run anyway: not malformed
    assert appended.tokens.prefix_hit_tokens == shipped_consultants.tokens.prefix_hit_tokens
    assert appended.evictions > shipped_consultants.evictions        # uncached tails in line behind cached blocks


def _lookup_names_a_free_block(token_ids, block_size, hash_fn, table, holds):
    return [0] if len(token_ids) > block_size else []     # block 0, whatever it holds now


def _lookup_reversed(token_ids, block_size, hash_fn, table, holds):
    return sol.cached_prefix_blocks(token_ids, block_size, hash_fn, table, holds)[::-1]


def _lookup_writes_the_table(token_ids, block_size, hash_fn, table, holds):
    table.clear()
    return []


def _free_keeps_the_cached(free_queue, ref_counts, blocks, cached):
    sol.free_blocks(free_queue, ref_counts, blocks, cached)
    free_queue[:] = [b for b in free_queue if b not in cached]


@pytest.mark.parametrize("broken, message", [
    (dict(cached_prefix_blocks=_lookup_names_a_free_block),
     r"cached_prefix_blocks\(\[.* \(\d+ tokens\), 3, hash_fn, table, holds\): returned \[0\]: block 0 is free and "
     r"caches nothing"),
    (dict(cached_prefix_blocks=_lookup_reversed),
     r"cached_prefix_blocks\(.*\): returned \[.*\]: block \d+ holds tokens .*, not block 0 of this prompt .*: its "
     r"K/V are another prefix's"),
    (dict(cached_prefix_blocks=_lookup_writes_the_table),
     r"cached_prefix_blocks\(.*\) raised AttributeError: 'mappingproxy' object has no attribute 'clear', at "
     r"`table.clear\(\)`"),
    (dict(block_hashes=_chain_partial_too),
     r"block_hashes\(\[.* \((\d+) tokens\), 3, hash_fn\): returned \d+ hashes; \1 tokens fill \d+ blocks of 3"),
    (dict(block_hashes=_chain_no_parent),
     r"block_hashes\(.*\): hash 1 is [0-9a-f]{12}\.\.\., but the engine's chain, which its blocks are registered "
     r"under, has [0-9a-f]{12}\.\.\."),
    (dict(free_blocks=_free_keeps_the_cached),
     r"free_blocks\(.*\): the free queue is .*: free blocks \[.*\] are missing \(never handed out again\)"),
    (dict(free_blocks=_ignores_refs),
     r"free_blocks\(.*\): block \d+'s reference count is 0, expected \d+ \(it was \d+; a release drops one "
     r"reference"),
    (dict(touch=_touch_keeps_in_queue),
     r"touch\(free_queue=.*, block=(\d+)\): the free queue is .*: blocks \[\1\] are in use"),
])
def test_a_broken_function_inside_the_engine_is_stopped_naming_the_call_and_the_value(broken: dict,
                                                                                       message: str) -> None:
    with pytest.raises(PartError, match=r"^your prefix cache \(test\): " + message):
        simulate(copilot50(seed=0, length_scale=1 / 16), enable_prefix_caching=True,
                 block_manager=_functions(**broken).memory, **ch8.ENGINE_RUN)


@pytest.mark.usefixtures("zh_tw")
def test_a_broken_function_inside_the_engine_is_stopped_in_zh_tw() -> None:
    module = types.SimpleNamespace(**{name: getattr(sol, name) for name in FUNCTIONS})
    module.cached_prefix_blocks = _lookup_names_a_free_block     # the part named by default: "your prefix cache"
    with pytest.raises(PartError) as stopped:
        simulate(copilot50(seed=0, length_scale=1 / 16), enable_prefix_caching=True,
                 block_manager=ReaderFunctions.of(module).memory, **ch8.ENGINE_RUN)
    message = str(stopped.value)
    assert message.startswith("你的前綴快取：cached_prefix_blocks([") and " 個 token), 3, hash_fn, table, holds)" in message
    assert message.endswith("：傳回了 [0]：區塊 0 是空閒的，沒有快取任何內容（已被逐出，或從來不是填滿的區塊）；"
                            "只有 holds 中的區塊才能算命中"), message


def _colliding(parent: bytes, tokens) -> bytes:
    """The engine's hash contract with 61 values: blocks of the consultants collide all the time."""
    return bytes([(sum(parent) + sum(tokens)) % 61])


def test_under_a_colliding_hash_the_checked_lookup_finds_what_the_shipped_cache_does_and_no_check_is_stopped() -> None:
    requests = copilot50(seed=0, length_scale=1 / 16)
    shipped, mine = (simulate(requests, enable_prefix_caching=True, block_manager=partial(factory, hash_fn=_colliding),
                              **ch8.ENGINE_RUN) for factory in (BlockManager, _functions().memory))
    assert mine.tokens == shipped.tokens and mine.evictions == shipped.evictions
    sha256 = simulate(requests, enable_prefix_caching=True, **ch8.ENGINE_RUN)
    assert 0 < shipped.tokens.prefix_hit_tokens < sha256.tokens.prefix_hit_tokens        # collisions cost hits
    with pytest.raises(PartError, match=r"cached_prefix_blocks\(.*\): returned \[.*\]: block \d+ holds tokens .*, not "
                                        r"block \d+ of this prompt .*: its K/V are another prefix's"):
        simulate(requests, enable_prefix_caching=True, **ch8.ENGINE_RUN,
                 block_manager=partial(_functions(cached_prefix_blocks=_no_check).memory, hash_fn=_colliding))


def test_a_lookup_that_leaves_no_token_to_compute_is_stopped() -> None:
    memory = _functions(cached_prefix_blocks=_no_cap).memory(8, 4, enable_prefix_caching=True)
    again = Request("again", list(range(200, 208)))
    memory.admit(Request("first", list(range(200, 208))), 8)     # two full blocks, both cached
    assert memory.lookup(Request("one more", list(range(200, 209)))).num_tokens == 8
    with pytest.raises(PartError, match=r"returned 2 blocks, 8 of 8 tokens: the last token must be left to compute"):
        memory.lookup(again)


def test_a_file_that_is_still_the_stub_or_lacks_a_function_is_not_passed(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prefix_cache.py"
    path.write_text("def block_hashes(token_ids, block_size, hash_fn):\n    raise NotImplementedError\n\n"
                    "def free_blocks(free_queue, ref_counts, blocks, cached):\n    raise NotImplementedError\n\n"
                    "def cached_prefix_blocks(token_ids, block_size, hash_fn, table, holds):\n"
                    "    raise NotImplementedError\n")
    assert ch8.check_prefix_cache(path) is False
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.startswith("○ ") and " not solved yet (" in line for line in lines)
    path.write_text("def block_hashes(token_ids, block_size, hash_fn):\n    return []\n")
    assert ch8.check_prefix_cache(path) is False
    assert "it defines no cached_prefix_blocks, free_blocks" in capsys.readouterr().out
    assert not path.with_name("prefix_cache.py.passed").exists()


@pytest.mark.usefixtures("zh_tw")
def test_the_file_grader_explains_in_zh_tw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prefix_cache.py"
    assert ch8.check_prefix_cache(path) is False
    path.write_text("import no_such_module\n")
    assert ch8.check_prefix_cache(path) is False
    path.write_text("def block_hashes(token_ids, block_size, hash_fn):\n    return []\n")
    assert ch8.check_prefix_cache(path) is False
    out = capsys.readouterr().out
    assert "prefix_cache.py 不存在：請先執行上方的 %%writefile 儲存格" in out
    assert "匯入這個檔案時引發了 ModuleNotFoundError：" in out
    assert "檔案中沒有定義 cached_prefix_blocks、free_blocks：這個檔案要放你的三個函式" in out
    assert out.count("（你的前綴快取）：未通過") == 0 and out.count("(你的前綴快取)：未通過") == 3
    assert untranslated(out) == []
