"""The spine of "your engine": a reader's part runs only if it passed unchanged, and runs checked."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pagedkv_edu.core.block_manager import BlockManager, ManagerBase
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.block_table import blocks_needed
from pagedkv_edu.core.prefix_cache import NO_HIT, PrefixCache, PrefixHit
from pagedkv_edu.core.request import SamplingParams
from pagedkv_edu.core.scheduler import schedule
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.guards import CheckedMemory, PartError
from pagedkv_edu.engine.runner import StandInRunner
from pagedkv_edu.exercises import my_engine
from pagedkv_edu.exercises.ch8_cache import ReaderBlockPool, ReaderPrefixCache
from pagedkv_edu.exercises.solutions import block_manager as solution
from pagedkv_edu.exercises.solutions import ch8 as prefix_solution
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)

SOLUTION = Path(solution.__file__)


def test_without_files_every_part_is_shipped_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    parts = my_engine.load_parts(tmp_path)
    assert parts.manager_class is BlockManager and parts.schedule is schedule and not parts.card.yours
    out = capsys.readouterr().out
    assert "block_manager" in out and "shipped" in out and "does not exist (chapter 2 writes it)" in out


def test_a_part_runs_once_it_passed_and_not_after_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "block_manager.py"
    shutil.copy(SOLUTION, path)
    assert my_engine.load_parts(tmp_path, quiet=True).card.yours == []          # written, not passed
    my_engine.mark_passed(path)
    parts = my_engine.load_parts(tmp_path, quiet=True)
    assert parts.card.yours == ["block_manager"] and issubclass(parts.manager_class, ManagerBase)
    assert parts.manager_class is not BlockManager and isinstance(parts.memory(8, 4), CheckedMemory)
    path.write_text(path.read_text() + "\n# an edit after passing\n")
    choice = my_engine.load_parts(tmp_path, quiet=True).card['block_manager']
    assert not choice.yours and "changed since it passed chapter 2" in choice.why


def test_a_passed_file_without_the_class_falls_back_naming_why(tmp_path: Path) -> None:
    path = tmp_path / "block_manager.py"
    path.write_text("class BlockManager:\n    pass\n")
    my_engine.mark_passed(path)
    choice = my_engine.load_parts(tmp_path, quiet=True).card['block_manager']
    assert not choice.yours and "no BlockManager class built on ManagerBase" in choice.why


def test_the_card_says_whether_your_manager_can_fork(tmp_path: Path) -> None:
    """Chapter 2's manager shares nothing until chapter 7 adds fork; a request with n > 1 needs it."""
    from pagedkv_edu.exercises.solutions import sharing_manager

    path = tmp_path / "block_manager.py"
    for source, says in ((SOLUTION, "no fork yet: chapter 7 adds it"), (Path(sharing_manager.__file__), "with fork")):
        shutil.copy(source, path)
        my_engine.mark_passed(path)
        choice = my_engine.load_parts(tmp_path, quiet=True).card["block_manager"]
        assert choice.yours and says in choice.why, choice.why


def serve(memory: Any, n: int = 8) -> tuple[dict[int, list[int]], list[tuple]]:
    engine = LLMEngine(StandInRunner(100), memory=memory, max_seq_len=64, max_num_batched_tokens=20)
    for i in range(n):
        engine.add_request(list(range(1, 6 + 3 * i)), SamplingParams(max_tokens=4 + i))
    outputs, steps = {}, []
    while engine.has_unfinished:
        for out in engine.step():
            outputs[out.request_id] = out.token_ids
        step = engine.last_step
        steps.append(([(s.seq.seq_id, s.num_new_tokens, s.new_block_ids) for s in step.scheduled],
                      [s.seq_id for s in step.preempted]))
    return outputs, steps


def test_the_solution_as_a_readers_part_serves_as_the_shipped_manager_does() -> None:
    mine = CheckedMemory(solution.BlockManager(BlockPool(12, 4), 64))
    theirs, shipped_steps = serve(BlockManager(12, 4, 64))
    outputs, steps = serve(mine)
    assert outputs == theirs and steps == shipped_steps and any(pre for _, pre in steps)   # preemptions too


# --- broken parts: each stopped at its first wrong answer, naming the part, the call and the value ---------
class CountsAPartialBlockFull(solution.BlockManager):
    def grow(self, seq: Any, n: int) -> list[int] | None:
        table, end = self.held[seq], seq.num_computed_tokens + n
        need = max(end // self.block_size + 1 - len(table), 0)   # floor + 1: a new block when the last is just full
        if need > self.pool.num_free:
            return None
        new = self.pool.allocate(need)
        table += new
        return new


class HalfAppliesARefusal(solution.BlockManager):
    def admit(self, seq: Any, n: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        if blocks_needed(n, self.block_size) > self.pool.num_free:
            self.pool.allocate(self.pool.num_free)               # takes what there is, then says no
            return None
        return super().admit(seq, n, hit)


class ReturnsTheWholeTableOnGrowth(solution.BlockManager):
    def grow(self, seq: Any, n: int) -> list[int] | None:
        new = super().grow(seq, n)
        return None if new is None else list(self.held[seq])


class ForgetsToRelease(solution.BlockManager):
    def release(self, seq: Any) -> list[int]:
        return self.held[seq][::-1]


class NamesAFreeBlock(solution.BlockManager):
    def admit(self, seq: Any, n: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        ids = super().admit(seq, n, hit)
        if ids is not None and self.pool.num_free:
            self.held[seq][-1] = self.pool.free_ids()[-1]       # a block nobody holds
        return None if ids is None else list(self.held[seq])


class RaisesInside(solution.BlockManager):
    def grow(self, seq: Any, n: int) -> list[int] | None:
        return self.pool.allocate(self.pool.num_free + 1)        # more than there is: the pool raises


@pytest.mark.parametrize("broken, message", [
    (RaisesInside, r"grow\(.*\) raised OutOfBlocksError: asked for \d+ blocks"),
    (CountsAPartialBlockFull, r"grow\(.*\): the table \[.*\] has \d+ blocks for \d+ tokens"),
    (HalfAppliesARefusal, r"admit\(.*\): refused \(None\) but changed the memory: free blocks"),
    (ReturnsTheWholeTableOnGrowth, r"grow\(.*\): returned \[.*\], but the table went from"),
    (ForgetsToRelease, r"release\(.*\): the sequence still holds blocks"),
    (NamesAFreeBlock, r"admit\(.*\): the table \[.*\] names blocks it does not hold"),
])
def test_a_broken_part_stops_the_engine_with_a_message(broken: type, message: str) -> None:
    memory = CheckedMemory(broken(BlockPool(12, 4), 64), "your block manager (test)")
    with pytest.raises(PartError, match=r"^your block manager \(test\): " + message):
        serve(memory)


@pytest.mark.parametrize("broken, message", [
    (RaisesInside, r"grow\(.*\) 引發了 OutOfBlocksError："),
    (CountsAPartialBlockFull, r"grow\(.*\)：區塊表 \[.*\] 為 \d+ 個 token 配了 \d+ 個區塊"),
    (HalfAppliesARefusal, r"admit\(.*\)：拒絕了（None），卻改動了記憶體"),
    (ReturnsTheWholeTableOnGrowth, r"grow\(.*\)：回傳了 \[.*\]，但區塊表從"),
    (ForgetsToRelease, r"release\(.*\)：釋放之後，這條序列仍佔著區塊"),
    (NamesAFreeBlock, r"admit\(.*\)：區塊表 \[.*\] 列出了它並未佔用的區塊"),
])
@pytest.mark.usefixtures("zh_tw")
def test_the_engines_checks_speak_the_readers_language(broken: type, message: str) -> None:
    """The engine sits below the language module: the graders' layer hands the check its translator."""
    from pagedkv_edu.viz.language import tr

    memory = CheckedMemory(broken(BlockPool(12, 4), 64), tr("your block manager ({path})", path="test"), tr=tr)
    with pytest.raises(PartError, match=r"^你的區塊管理器（test）：" + message):
        serve(memory)


# --- chapter 8's prefix cache: a part that is a module of three functions -------------------------------
PREFIX_SOLUTION = Path(prefix_solution.__file__)


def test_without_a_prefix_cache_file_the_shipped_cache_runs_and_says_why(tmp_path: Path) -> None:
    parts = my_engine.load_parts(tmp_path, quiet=True)
    choice = parts.card['prefix_cache']
    assert choice.part.name == "prefix_cache" and not choice.yours and choice.value is PrefixCache
    assert "prefix_cache.py does not exist (chapter 8 writes it)" in choice.why and parts.prefix_cache is None
    assert isinstance(parts.memory(8, 4, enable_prefix_caching=True).prefix_cache, PrefixCache)


def test_a_passed_prefix_cache_file_is_the_engines_cache_until_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "prefix_cache.py"
    shutil.copy(PREFIX_SOLUTION, path)
    assert my_engine.load_parts(tmp_path, quiet=True).prefix_cache is None                 # written, not passed
    my_engine.mark_passed(path)
    parts = my_engine.load_parts(tmp_path, quiet=True)
    assert parts.card.yours == ["prefix_cache"] and parts.card['prefix_cache'].why.endswith("passed chapter 8")
    cached = parts.memory(8, 4, 32, enable_prefix_caching=True, watermark_blocks=1)
    assert isinstance(cached.prefix_cache, ReaderPrefixCache) and isinstance(cached.pool, ReaderBlockPool)
    assert cached.max_seq_len == 32 and cached.watermark_blocks == 1 and str(path) in cached.prefix_cache.functions.part
    plain = parts.memory(8, 4)                                 # no prefix caching asked: the shipped manager as it is
    assert plain.prefix_cache is None and type(plain.pool) is BlockPool
    path.write_text(path.read_text() + "\n# an edit after passing\n")
    choice = my_engine.load_parts(tmp_path, quiet=True).card['prefix_cache']
    assert not choice.yours and "changed since it passed chapter 8" in choice.why


def test_a_passed_prefix_cache_file_without_a_function_falls_back_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "prefix_cache.py"
    path.write_text("def block_hashes(token_ids, block_size, hash_fn):\n    return []\n")
    my_engine.mark_passed(path)
    choice = my_engine.load_parts(tmp_path, quiet=True).card['prefix_cache']
    assert not choice.yours and choice.why.endswith("defines no cached_prefix_blocks, free_blocks")


# --- in zh-TW -------------------------------------------------------------------------------------
@pytest.mark.usefixtures("zh_tw")
def test_the_report_card_in_zh_tw(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(SOLUTION, tmp_path / "block_manager.py")
    my_engine.mark_passed(tmp_path / "block_manager.py")
    (tmp_path / "prefix_cache.py").write_text("def block_hashes(token_ids, block_size, hash_fn):\n    return []\n")
    my_engine.mark_passed(tmp_path / "prefix_cache.py")
    (tmp_path / "scheduler.py").write_text("def schedule(state):\n    return None\n")
    parts = my_engine.load_parts(tmp_path)
    out = capsys.readouterr().out
    assert out.startswith("部件") and untranslated(out) == [], out
    assert "已通過第 2 章（還沒有分岔：第 7 章才會加上；n > 1 需要它）" in out and "隨附" in out
    assert "scheduler.py 還沒有通過第 6 章的評分程式" in out and "沒有定義 cached_prefix_blocks、free_blocks" in out
    assert f"你的區塊管理器（{my_engine.PARTS['block_manager'].path()}）" == str(parts.memory(8, 4).part)


@pytest.mark.usefixtures("zh_tw")
def test_a_part_file_that_cannot_run_says_why_in_zh_tw(tmp_path: Path) -> None:
    missing, why = my_engine.function_in(tmp_path / "nope.py", "schedule", "(state)", (schedule,), "policy")
    assert missing is None and "不存在：請執行上方的 %%writefile 儲存格" in str(why)
    (tmp_path / "broken.py").write_text("1 / 0\n")
    assert str(my_engine.function_in(tmp_path / "broken.py", "schedule", "(state)", (), "policy")[1]).endswith(
        "broken.py 時引發了 ZeroDivisionError：division by zero，出錯的那一行：`1 / 0`")
    (tmp_path / "shipped.py").write_text("from pagedkv_edu.core.scheduler import schedule\n")
    assert "匯入了隨附的 schedule，而不是自己定義" in str(
        my_engine.function_in(tmp_path / "shipped.py", "schedule", "(state)", (schedule,), "policy")[1])
