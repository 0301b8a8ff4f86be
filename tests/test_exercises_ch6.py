"""The chapter 6 graders (the admission test and the scheduler's step) accept right answers in any style and reject wrong ones."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.exercises import ch6
from pagedkv_edu.exercises.grading import ArgsCase
from pagedkv_edu.exercises.solutions import ch6 as sol6


# --- can_admit ------------------------------------------------------------------------------------
def _admit_cases() -> list[ArgsCase]:
    return [ArgsCase(name, tuple(args)) for name, *args in ch6.ADMIT_CASES] + ch6.HIDDEN_ADMIT_CASES[:60]


def test_can_admit_solution_agrees_with_the_scheduler() -> None:
    for case in _admit_cases():
        tokens, b, free, watermark, running = case.args
        manager = BlockManager(free + running, b, watermark_blocks=watermark)
        for i in range(running):
            manager.admit(f"running-{i}", 1)
        assert manager.pool.num_free == free, case.name
        assert manager.can_admit("new", tokens) is sol6.can_admit(*case.args), case.name


def test_hidden_admit_cases_cover_the_edges() -> None:
    args = [c.args for c in ch6.HIDDEN_ADMIT_CASES]
    assert {3, 5, 6, 12} <= {b for _, b, _, _, _ in args}
    assert any(r == 1 and w > 0 for *_, w, r in args)
    assert any(-(-n // b) + w == f and r > 0 for n, b, f, w, r in args)   # exact fits with the watermark


_ADMIT_KEY = {tuple(args): sol6.can_admit(*args) for _, *args in ch6.ADMIT_CASES}

ADMIT_WRONG = {
    "rounds down": lambda n, b, f, w, r: n // b + (w if r else 0) <= f,
    "no watermark": lambda n, b, f, w, r: -(-n // b) <= f,
    "watermark even when idle": lambda n, b, f, w, r: -(-n // b) + w <= f,
    "off by one": lambda n, b, f, w, r: -(-n // b) + (w if r else 0) < f,
    "watermark only for several running": lambda n, b, f, w, r: -(-n // b) + (w if r > 1 else 0) <= f,
    "watermark minus the one running": lambda n, b, f, w, r: -(-n // b) + max(0, w - (r == 1)) * (r > 0) <= f,
    "power-of-two shift": lambda n, b, f, w, r: ((n + b - 1) >> (b.bit_length() - 1)) + (w if r else 0) <= f,
    "answer key": lambda n, b, f, w, r: _ADMIT_KEY.get((n, b, f, w, r), -(-n // b) <= f),
}


def _admit_numpy(n: int, b: int, f: int, w: int, r: int) -> np.bool_:
    return np.ceil(n / b) + np.where(r > 0, w, 0) <= f


def _admit_torch(n: int, b: int, f: int, w: int, r: int) -> torch.Tensor:
    need = torch.div(torch.tensor(n), b, rounding_mode="floor") + (n % b > 0)
    return need + (w if r else 0) <= f


def _admit_loop(n: int, b: int, f: int, w: int, r: int) -> bool:
    blocks, stored = 0, 0
    while stored < n:
        blocks, stored = blocks + 1, stored + b
    reserve = w if r > 0 else 0
    return f - blocks >= reserve


ADMIT_RIGHT = {"reference": sol6.can_admit, "numpy": _admit_numpy, "torch": _admit_torch, "loop": _admit_loop,
               "math.ceil": lambda n, b, f, w, r: math.ceil(n / b) <= f - (w if r else 0)}


@pytest.mark.parametrize("name", ADMIT_RIGHT)
def test_can_admit_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_can_admit(ADMIT_RIGHT[name]) is True
    assert "✓ can_admit（允入判斷）: passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", ADMIT_WRONG)
def test_can_admit_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_can_admit(ADMIT_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ can_admit（允入判斷）: failed") and out.count("expected") == 1


def test_can_admit_messages(capsys: pytest.CaptureFixture[str]) -> None:
    ch6.check_can_admit(ADMIT_WRONG["watermark only for several running"])
    out = capsys.readouterr().out
    assert "hidden case" in out and "running=1)" in out and "1 request running" in out
    ch6.check_can_admit(lambda n, b, f, w, r: int(sol6.can_admit(n, b, f, w, r)))
    assert "the answer is True or False" in capsys.readouterr().out


@pytest.mark.parametrize("stub", [lambda *a: False, lambda *a: True, lambda *a: None])
def test_can_admit_stub(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_can_admit(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ can_admit（允入判斷）: not solved yet") and "expected" not in out and "tokens=" not in out


# --- schedule: the scheduler's step ---------------------------------------------------------------
def test_hidden_schedule_cases_cover_the_rules() -> None:
    cases = ch6.HIDDEN_SCHEDULE_CASES
    runs = [ch6._reference_run(c) for c in cases]
    assert {3, 5, 6, 12} <= {c.block_size for c in cases}
    assert sum(any(v.preempted for v in run) for run in runs) >= 8                       # memory runs short
    assert any(any(len(v.preempted) > 1 for v in run) for run in runs)                   # two victims in a step
    assert sum(any(n < c.requests[0][1] and v.admitted for v in run for n in v.scheduled.values())
               for c, run in zip(cases, runs) if c.token_budget < 10_000) >= 5            # chunked prompts
    assert sum(any("." in s for v in run for s in v.scheduled) for run in runs) >= 10    # forked samples
    assert any(c.watermark_blocks for c in cases) and any(c.max_num_seqs < 64 for c in cases)


def _preempt(state, victim) -> None:
    state.running.remove(victim)
    state.memory.release(victim)
    state.waiting.appendleft(victim)


def _solution_with(*, victim=lambda running: running[-1], admit_after_preempt=False, chunk=True, grow_first=True,
                   seats=lambda seqs: sum(s.num_seqs for s in seqs), requeue=_preempt, skip_blocked_head=False):
    """The solution with one rule changed: each wrong variant below breaks exactly one."""
    def grow(state, budget, plan):
        preempted = False
        for seq in list(state.running):
            if seq in plan:   # admitted in this step (the variant that admits first)
                continue
            if budget == 0 or seq not in state.running:
                break
            new = min(seq.num_tokens - seq.num_computed, budget) if chunk else seq.num_tokens - seq.num_computed
            while not state.memory.can_grow(seq, new):
                v = victim(state.running)
                requeue(state, v)
                preempted = True
                if v is seq:
                    break
            if seq in state.running:
                state.memory.grow(seq, new)
                plan[seq] = new
                budget -= new
        return budget, preempted

    def admit(state, budget, plan, preempted):
        skipped = []
        while state.waiting and budget > 0 and (admit_after_preempt or not preempted):
            seq = state.waiting[0]
            new = min(seq.num_tokens, budget) if chunk else seq.num_tokens
            if seats(state.running) + seq.num_seqs > state.max_num_seqs or not state.memory.can_admit(seq, new):
                if skip_blocked_head:
                    skipped.append(state.waiting.popleft())
                    continue
                break
            state.waiting.popleft()
            state.memory.admit(seq, new)
            state.running.append(seq)
            plan[seq] = new
            budget -= new
        state.waiting.extendleft(reversed(skipped))
        return budget

    def schedule(state):
        plan = {}
        if grow_first:
            budget, preempted = grow(state, state.token_budget, plan)
            admit(state, budget, plan, preempted)
        else:
            budget = admit(state, state.token_budget, plan, False)
            grow(state, budget, plan)
        return plan
    return schedule


def _back_of_queue(state, victim) -> None:
    state.running.remove(victim)
    state.memory.release(victim)
    state.waiting.append(victim)


SCHEDULE_WRONG = {
    "preempts the oldest": _solution_with(victim=lambda running: running[0]),
    "admits after a preemption": _solution_with(admit_after_preempt=True),
    "ignores the token budget": _solution_with(chunk=False),
    "grows after admitting": _solution_with(grow_first=False),
    "forgets a forked sample's seat": _solution_with(seats=len),
    "puts the preempted at the back of the queue": _solution_with(requeue=_back_of_queue),
    "lets later requests pass a blocked head": _solution_with(skip_blocked_head=True),
}


def _schedule_indexed(state):
    """The package's style: an index over the running list, a budget counted down, pairs of ids returned."""
    budget, out, i, short_of_memory = state.token_budget, [], 0, False
    while i < len(state.running) and budget > 0:
        seq = state.running[i]
        need = min(seq.num_tokens - seq.num_computed, budget)
        while not state.memory.can_grow(seq, need):
            newest = state.running[-1]
            _preempt(state, newest)
            short_of_memory = True
            if newest is seq:
                break
        if seq not in state.running:
            break
        state.memory.grow(seq, need)
        out.append((seq.seq_id, need))
        budget -= need
        i += 1
    if short_of_memory:
        return out
    seats = sum(s.num_seqs for s in state.running)
    while state.waiting and budget:
        head = state.waiting[0]
        take = min(head.num_tokens, budget)
        if seats + head.num_seqs > state.max_num_seqs or not state.memory.can_admit(head, take):
            break
        state.memory.admit(state.waiting.popleft(), take)
        state.running.append(head)
        seats += head.num_seqs
        out.append((head.seq_id, np.int64(take)))
        budget -= take
    return out


SCHEDULE_RIGHT = {"reference": sol6.schedule, "indexed, pairs of ids": _schedule_indexed, "the same, parametrised": _solution_with()}


@pytest.mark.parametrize("name", SCHEDULE_RIGHT)
def test_schedule_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_schedule(SCHEDULE_RIGHT[name]) is True
    assert "passed (5 cases from the text and 40 hidden random ones)" in capsys.readouterr().out


@pytest.mark.parametrize("name", SCHEDULE_WRONG)
def test_schedule_rejects_wrong_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_schedule(SCHEDULE_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ schedule（排程器的一步）: failed") and "step " in out


@pytest.mark.parametrize("name, hint", [
    ("preempts the oldest", "preempt the newest running sequence"),
    ("admits after a preemption", "a step that preempted admits nobody"),
    ("ignores the token budget", "over the token budget"),
    ("grows after admitting", "grow the running sequences first"),
    ("forgets a forked sample's seat", "a request with n samples takes n seats"),
    ("lets later requests pass a blocked head", "it blocks the ones behind it"),
    ("puts the preempted at the back of the queue", "the waiting queue after the step should be"),
])
def test_schedule_messages_name_the_rule(name: str, hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    ch6.check_schedule(SCHEDULE_WRONG[name])
    assert hint in capsys.readouterr().out


@pytest.mark.parametrize("name", SCHEDULE_WRONG)
def test_schedule_hints_only_their_cause(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    ch6.check_schedule(SCHEDULE_WRONG[name])
    out = capsys.readouterr().out
    hints = ("preempt the newest", "admits nobody", "over the token budget", "grow the running sequences first",
             "takes n seats", "blocks the ones behind it", "the waiting queue after the step")
    assert sum(h in out for h in hints) == 1


@pytest.mark.parametrize("stub", [lambda s: None, lambda s: (_ for _ in ()).throw(NotImplementedError())])
def test_schedule_stub(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_schedule(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ schedule（排程器的一步）: not solved yet") and "step " not in out


def test_schedule_bad_answers_name_the_cause(capsys: pytest.CaptureFixture[str]) -> None:
    def forgets_memory(state):   # schedules the head without taking its blocks
        return {state.waiting[0]: 1} if state.waiting else {}
    assert ch6.check_schedule(forgets_memory) is False
    assert "not in state.running" in capsys.readouterr().out

    def grows_too_much(state):
        plan = sol6.schedule(state)
        if plan:
            seq = next(iter(plan))
            plan[seq] += 1
        return plan
    assert ch6.check_schedule(grows_too_much) is False
    assert "grow or admit exactly the tokens you schedule" in capsys.readouterr().out


def test_memory_refuses_bad_calls_before_any_change() -> None:
    memory = ch6.Memory(4, 3)
    seq = ch6.Seq("a", 5)
    with pytest.raises(ValueError, match="not running"):
        memory.grow(seq, 1)
    with pytest.raises(ValueError, match="n=0 tokens"):
        memory.admit(seq, 0)
    with pytest.raises(ValueError, match="tokens it does not have"):
        memory.admit(seq, 6)
    assert memory.num_free_blocks == 4
    memory.admit(seq, 5)
    assert memory.block_table(seq) == [0, 1] and memory.num_free_blocks == 2
    with pytest.raises(ValueError, match="running already"):
        memory.admit(seq, 1)


def test_try_schedule_returns_the_steps() -> None:
    rows = ch6.try_schedule(sol6.schedule, 0)
    assert len(rows) == len(ch6._reference_run(ch6.SCHEDULE_CASES[0]))
    assert all(r["yours"].scheduled == r["expected"].scheduled and r["yours"].tables == r["expected"].tables for r in rows)
    assert rows[0]["expected"].admitted == ("A", "B", "C")
    wrong = ch6.try_schedule(SCHEDULE_WRONG["preempts the oldest"], "the chapter's pool: 8 blocks of 4, prompts of 7, 8 and 9 tokens")
    assert wrong[-1]["yours"].preempted != wrong[-1]["expected"].preempted
    with pytest.raises(KeyError, match="no shown case"):
        ch6.try_schedule(sol6.schedule, "nope")
