"""The capstone (chapter 12): every part a reader can write, from the book's solutions, makes an engine that serves
the consultants on SmolLM2 as the shipped engine does, decision for decision and token for token.

The solutions are saved where the chapters save a reader's files (a ``my_engine/`` and ``my_kernels/`` of a
temporary directory); the step passes this chapter's grader, the others are marked passed as their graders
would (their own tests grade them). On a CPU the decode kernel runs in Triton's interpreter, about ten seconds
a decode step of SmolLM2, so the capstone's run sets it aside for the reader's gather (``capstone_parts``),
and a separate run of one request puts the kernel itself inside the engine.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from pagedkv_edu.core.scheduler import schedule as shipped_schedule
from pagedkv_edu.engine import step as shipped_step
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.guards import CheckedMemory
from pagedkv_edu.exercises import ch12, my_engine
from pagedkv_edu.exercises.solutions import ch3, ch4_kernel, ch6, ch8, sharing_manager

PARTS = ["block_manager", "gather", "decode_kernel", "scheduler", "prefix_cache", "step"]


@pytest.fixture(scope="module")
def all_yours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``my_engine/`` holding every solution as a reader saves it, each passed: the directory."""
    directory = tmp_path_factory.mktemp("notebooks") / "my_engine"
    directory.mkdir()
    (directory.parent / "my_kernels").mkdir()
    shutil.copy(sharing_manager.__file__, directory / "block_manager.py")   # chapter 7's: chapter 2's, with fork
    shutil.copy(ch3.__file__, directory / "gather.py")
    kernel = Path(ch4_kernel.__file__).read_text().replace("from ... import runtime", "import pagedkv_edu")
    (directory.parent / "my_kernels" / "paged_decode.py").write_text(kernel)
    (directory / "scheduler.py").write_text(ch6.scheduler_file())
    shutil.copy(ch8.__file__, directory / "prefix_cache.py")
    for name in ("block_manager", "gather", "decode_kernel", "scheduler", "prefix_cache"):
        my_engine.mark_passed(my_engine.PARTS[name].path(directory))
    shutil.copy(shipped_step.__file__, directory / "step.py")
    with contextlib.redirect_stdout(io.StringIO()):
        assert ch12.check_step(directory / "step.py")                     # this chapter's grader marks it
    return directory


@pytest.fixture(scope="module")
def smollm2() -> Any:
    from pagedkv_edu.model.loading import load_model

    return load_model("smollm2-135m")


def test_every_part_is_yours(all_yours: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parts = my_engine.load_parts(all_yours)
    card = parts.card
    assert [c.part.name for c in card.choices] == PARTS and card.yours == PARTS
    assert card.your_lines == sum(my_engine.code_lines(my_engine.PARTS[p].path(all_yours)) for p in PARTS) > 150
    assert "your code the engine runs:" in capsys.readouterr().out
    assert parts.step is not shipped_step.step and parts.schedule is not shipped_schedule
    assert parts.prefix_cache is not None and getattr(parts.attention, "__name__", "") == "your_decode_kernel"
    assert ch12.yours_summary(card).startswith("6 of 6 parts are yours") and "every part of it" in ch12.yours_summary(card)

    kept, note = ch12.capstone_parts(parts, kernel=True)
    assert kept is parts and note == ""
    served, note = ch12.capstone_parts(parts, kernel=False)    # what the capstone does on a CPU
    assert "Triton runs it in its interpreter" in note and "your chapter-3 gather" in note
    assert getattr(served.attention, "__name__", "") == "your_gather" and served.step is parts.step
    assert served.card.yours == [p for p in PARTS if p != "decode_kernel"] and card.yours == PARTS
    assert "5 of 6 parts are yours" in ch12.yours_summary(served.card)


def test_a_manager_without_fork_is_set_aside_for_the_n3_request(tmp_path: Path) -> None:
    """Chapter 2's manager (no fork yet) passed: the capstone's n = 3 request would stop the engine, so the
    shipped manager serves, and the card and the note say why."""
    from pagedkv_edu.core.block_manager import BlockManager
    from pagedkv_edu.exercises.solutions import block_manager

    directory = tmp_path / "my_engine"
    directory.mkdir()
    shutil.copy(block_manager.__file__, directory / "block_manager.py")
    my_engine.mark_passed(directory / "block_manager.py")
    parts = my_engine.load_parts(directory, quiet=True)
    assert parts.card.yours == ["block_manager"] and parts.manager_class is not BlockManager
    served, note = ch12.capstone_parts(parts, kernel=False)
    assert served.manager_class is BlockManager and served.card.yours == [] and "no fork yet" in note
    assert "cannot fork yet" in served.card["block_manager"].why


@pytest.mark.slow
def test_the_capstone_on_your_parts(all_yours: Path, smollm2: Any) -> None:
    """Six consultants at 1/32 of their lengths, request 1 with n = 3, in 24 blocks of 4 with prefix caching."""
    parts, _ = ch12.capstone_parts(my_engine.load_parts(all_yours, quiet=True), kernel=False)
    work = ch12.capstone_workload(smollm2, num_requests=6, length_scale=1 / 32, output_scale=1, kv_budget_tokens=96)
    engine = parts.engine(smollm2.model, smollm2.tokenizer, **work.settings)
    assert isinstance(engine.memory, CheckedMemory) and engine.step_fn is parts.step
    assert engine.scheduler.policy is parts.schedule and engine.config.backend is parts.attention
    mine = ch12.serve(engine, work, max_tokens=10)
    shipped = ch12.serve(LLMEngine(smollm2.model, smollm2.tokenizer, **work.settings), work, max_tokens=10)
    assert ch12.first_difference(mine, shipped) == "" and mine.tokens == shipped.tokens and mine.steps == shipped.steps
    assert mine.preemptions >= 1 and mine.preempted and mine.prefix_hit_tokens > 0
    assert len(mine.tokens[work.sampled]) == 3                       # n = 3: three samples, forked after the prompt
    greedy = ch12.transformers_greedy(smollm2, [work.prompts[i] for i in work.greedy],
                                      [min(work.params[i].max_tokens, 10) for i in work.greedy])
    assert [mine.tokens[i][0] for i in work.greedy] == greedy


@pytest.mark.slow
def test_your_kernel_inside_your_engine(all_yours: Path, smollm2: Any) -> None:
    """Every part, the decode kernel too (in the interpreter): the first consultant, its prefill and one decode step."""
    parts = my_engine.load_parts(all_yours, quiet=True)
    work = ch12.capstone_workload(smollm2, num_requests=2, length_scale=1 / 32, kv_budget_tokens=400)
    mine = ch12.serve(parts.engine(smollm2.model, smollm2.tokenizer, **work.settings), work, first=1, max_tokens=2)
    shipped = ch12.serve(LLMEngine(smollm2.model, smollm2.tokenizer, **work.settings), work, first=1, max_tokens=2)
    assert parts.attention.tiles.launches == smollm2.model.config.num_layers   # every layer of the decode step
    assert mine.tokens == shipped.tokens and mine.steps == shipped.steps and len(mine.tokens[0][0]) == 2
