"""The chapter 6 graders (the admission test and the scheduling policy) accept right answers in any style and reject wrong ones.

A policy saved as a file (the chapter's ``my_engine/scheduler.py``) is marked passed when it passes, and
only then does the engine run it: on SmolLM2, to the shipped engine's tokens and steps.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.request import Request, SamplingParams
from pagedkv_edu.core.scheduler import SchedulerState, schedule
from pagedkv_edu.engine.engine import LLMEngine
from pagedkv_edu.engine.runner import StandInRunner
from pagedkv_edu.exercises import ch6, my_engine
from pagedkv_edu.exercises.grading import ArgsCase
from pagedkv_edu.exercises.solutions import ch6 as sol6
from pagedkv_edu.model.loading import load_model
from tests.zh_output import untranslated, zh_tw  # noqa: F401  (zh_tw is a fixture)


# --- can_admit ------------------------------------------------------------------------------------
def _admit_cases() -> list[ArgsCase]:
    return [ArgsCase(name, tuple(args)) for name, *args in ch6.ADMIT_CASES] + ch6.HIDDEN_ADMIT_CASES[:60]


def test_can_admit_solution_agrees_with_the_block_manager() -> None:
    for case in _admit_cases():
        tokens, b, free, watermark, running = case.args
        manager = BlockManager(free + running, b)
        for i in range(running):
            assert manager.admit(Request(f"running-{i}", None, num_prompt_tokens=1), 1) is not None
        manager.watermark_blocks = watermark   # kept free for the running from here on
        assert manager.pool.num_free == free, case.name
        new = Request("new", None, num_prompt_tokens=tokens)
        admitted = manager.fits(tokens) and manager.admit(new, tokens) is not None
        assert admitted is sol6.can_admit(*case.args), case.name


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


@pytest.mark.parametrize("name", [*ADMIT_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_can_admit_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**ADMIT_WRONG, "raises": lambda n, b, f, w, r: [][n], "stub": lambda *a: False}[name]
    assert ch6.check_can_admit(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ can_admit（允入判斷）：未通過", "○ can_admit（允入判斷）：尚未作答")), out
    assert untranslated(out) == []


# --- schedule: the scheduling policy --------------------------------------------------------------
def test_the_reference_is_the_shipped_policy() -> None:
    assert sol6.schedule is schedule


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
    assert sum(any(c.what == "grow" and not c.granted and c.seq_id in v.preempted for v in run for c in v.calls)
               for run in runs) >= 3                                      # refused, and the newest: it preempts itself


def _solution_with(*, victim=lambda running: running[-1], preempt=lambda state, v: state.preempt(v),
                   self_preempt=True, admit_after_preempt=False, chunk=True, grow_first=True, oldest_first=True,
                   seats=lambda seqs: sum(s.num_seqs for s in seqs), skip_blocked_head=False, pop_waiting=True,
                   advance=False):
    """The shipped policy, rewritten with one rule as a switch: each wrong variant below breaks exactly one."""
    def grow(state: SchedulerState, budget: int, plan: dict) -> tuple[int, bool]:
        preempted = False
        for seq in list(state.running) if oldest_first else list(reversed(state.running)):
            if seq in plan:   # admitted in this step (the variant that admits first)
                continue
            if budget == 0 or seq not in state.running:
                break
            todo = seq.num_tokens - seq.num_computed_tokens
            new = min(todo, budget) if chunk else todo
            while (ids := state.memory.grow(seq, new)) is None:
                v = victim(state.running)
                if v is seq and not self_preempt:
                    break
                preempt(state, v)
                preempted = True
                if v is seq:
                    break
            if ids is not None:
                plan[seq] = new
                budget -= new
                if advance:
                    seq.num_computed_tokens += new
        return budget, preempted

    def admit(state: SchedulerState, budget: int, plan: dict, preempted: bool) -> int:
        for seq in list(state.waiting):
            if budget <= 0 or (preempted and not admit_after_preempt):
                break
            hit = state.memory.lookup(seq)
            todo = seq.num_tokens - max(hit.num_tokens, seq.num_computed_tokens)
            new = min(todo, budget) if chunk else todo
            if seats(state.running) + seq.num_seqs > state.max_num_seqs or state.memory.admit(seq, new, hit) is None:
                if skip_blocked_head:
                    continue
                break
            if pop_waiting:
                state.waiting.remove(seq)
            state.running.append(seq)
            plan[seq] = new
            budget -= new
        return budget

    def policy(state: SchedulerState) -> dict:
        plan: dict = {}
        if grow_first:
            budget, preempted = grow(state, state.token_budget, plan)
            admit(state, budget, plan, preempted)
        else:
            grow(state, admit(state, state.token_budget, plan, False), plan)
        return plan
    return policy


def _preempt_by_hand(state: SchedulerState, victim: Request) -> None:
    """The old exercise's preemption, through the memory behind the Scheduler's back."""
    state.running.remove(victim)
    state.memory.release(victim)
    state.waiting.appendleft(victim)


SCHEDULE_WRONG = {
    "preempts the oldest": _solution_with(victim=lambda running: running[0]),
    "admits after a preemption": _solution_with(admit_after_preempt=True),
    "ignores the token budget": _solution_with(chunk=False),
    "admits before growing": _solution_with(grow_first=False),
    "grows the newest first": _solution_with(oldest_first=False),
    "forgets the seats of n samples": _solution_with(seats=len),
    "lets later requests pass a blocked head": _solution_with(skip_blocked_head=True),
    "leaves admitted sequences in the queue": _solution_with(pop_waiting=False),
    "keeps the newest when it cannot grow": _solution_with(self_preempt=False),
    "advances the counts itself": _solution_with(advance=True),
    "preempts by hand": _solution_with(preempt=_preempt_by_hand),
}

HINTS = {   # the hint each wrong variant must get, and no other
    "preempts the oldest": "preempt the newest running sequence",
    "admits after a preemption": "a step that preempted admits nobody",
    "ignores the token budget": "a sequence computes at most the budget left",
    "admits before growing": "grow the running sequences first",
    "grows the newest first": "grow the running oldest first",
    "forgets the seats of n samples": "a request with n samples takes n seats",
    "lets later requests pass a blocked head": "it blocks the ones behind it",
    "leaves admitted sequences in the queue": "popleft an admitted sequence",
    "keeps the newest when it cannot grow": "it preempts itself",
    "advances the counts itself": "leave seq.num_computed_tokens alone",
    "preempts by hand": "only with state.preempt(victim)",
}


def _schedule_indexed(state: SchedulerState) -> dict:
    """Another style: an index over the batch, asking how many blocks a growth takes before growing."""
    memory, budget, pairs, i, short_of_memory = state.memory, state.token_budget, [], 0, False
    while i < len(state.running) and budget > 0:
        seq = state.running[i]
        need = min(seq.num_tokens - seq.num_computed_tokens, budget)
        while memory.blocks_to_grow(seq, need) > memory.pool.num_free:
            newest = state.running[-1]
            state.preempt(newest)
            short_of_memory = True
            if newest is seq:
                break
        if seq not in state.running:
            break
        assert memory.grow(seq, need) is not None
        pairs.append((seq, need))
        budget -= need
        i += 1
    seats = sum(s.num_seqs for s in state.running)
    while state.waiting and budget and not short_of_memory:
        head = state.waiting[0]
        hit = memory.lookup(head)
        take = min(head.num_tokens - max(hit.num_tokens, head.num_computed_tokens), budget)
        if seats + head.num_seqs > state.max_num_seqs or memory.admit(head, take, hit) is None:
            break
        state.running.append(state.waiting.popleft())
        seats += head.num_seqs
        pairs.append((head, take))
        budget -= take
    return dict(pairs)


SCHEDULE_RIGHT = {"reference": sol6.schedule, "indexed, asks before it grows": _schedule_indexed,
                  "the same, parametrised": _solution_with()}


@pytest.mark.parametrize("name", SCHEDULE_RIGHT)
def test_schedule_accepts_right_answers(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_schedule(SCHEDULE_RIGHT[name]) is True
    assert "passed (5 cases from the text and 40 hidden random ones)" in capsys.readouterr().out


@pytest.mark.parametrize("name", SCHEDULE_WRONG)
def test_schedule_rejects_wrong_answers_with_their_hint_only(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_schedule(SCHEDULE_WRONG[name]) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ schedule（排程器的一步）: failed") and "  step " in out and "(before it: running" in out
    assert HINTS[name] in out, out
    assert [h for h in HINTS.values() if h in out] == [HINTS[name]], out


@pytest.mark.parametrize("stub", [lambda s: None, lambda s: (_ for _ in ()).throw(NotImplementedError())])
def test_schedule_stub(stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert ch6.check_schedule(stub) is False
    out = capsys.readouterr().out
    assert out.startswith("○ schedule（排程器的一步）: not solved yet") and "step " not in out


def test_schedule_bad_answers_name_the_cause(capsys: pytest.CaptureFixture[str]) -> None:
    def forgets_memory(state):   # schedules the head without taking its blocks
        return {state.waiting[0]: 1} if state.waiting else {}
    assert ch6.check_schedule(forgets_memory) is False
    out = capsys.readouterr().out
    assert "step 0" in out and "not in state.running" in out and "append an admitted sequence" in out

    def grows_too_much(state):
        plan = schedule(state)
        if plan:
            plan[next(iter(plan))] += 1
        return plan
    assert ch6.check_schedule(grows_too_much) is False
    assert "grow or admit exactly the tokens you schedule" in capsys.readouterr().out

    def keyed_by_id(state):
        return {seq.seq_id: n for seq, n in schedule(state).items()}
    assert ch6.check_schedule(keyed_by_id) is False
    assert "key the plan by the sequence records" in capsys.readouterr().out

    def grows_a_waiting_one(state):
        for seq in state.waiting:
            state.memory.grow(seq, 1)
        return {}
    assert ch6.check_schedule(grows_a_waiting_one) is False
    out = capsys.readouterr().out
    assert "step 0 (before it:" in out and "raised KeyError" in out and "holds no blocks" in out

    def float_tokens(state):
        return {seq: float(n) for seq, n in schedule(state).items()}
    assert ch6.check_schedule(float_tokens) is False
    assert "the tokens are ints" in capsys.readouterr().out

    def never_admits(state):   # nothing runs, nothing scheduled: the Scheduler gives up on the head
        return {}
    assert ch6.check_schedule(never_admits) is False
    out = capsys.readouterr().out
    assert "failed: got ('A',), expected ()" in out and "can never fit" in out


def test_try_schedule_returns_the_steps() -> None:
    rows = ch6.try_schedule(_schedule_indexed, 0)
    want = ch6._reference_run(ch6.SCHEDULE_CASES[0])
    assert len(rows) == len(want) and not any(r["problem"] for r in rows)
    assert all(r["yours"].scheduled == r["expected"].scheduled and r["yours"].tables == r["expected"].tables
               for r in rows)
    assert rows[0]["expected"].admitted == ("A", "B", "C") and rows[0]["yours"].calls[0] == ch6.Call("admit", "A", 7)
    assert rows[2]["expected"].preempted == ("C",) and ch6.Call("release", "C") in rows[2]["expected"].calls
    wrong = ch6.try_schedule(SCHEDULE_WRONG["preempts the oldest"], ch6.SCHEDULE_CASES[0].name)
    assert wrong[-1]["yours"].preempted == ("A",) != wrong[-1]["expected"].preempted
    refused = ch6.try_schedule(SCHEDULE_WRONG["advances the counts itself"], 0)
    assert refused[-1]["yours"] is None and "num_computed_tokens" in refused[-1]["problem"]
    assert "not solved yet" in ch6.try_schedule(lambda s: (_ for _ in ()).throw(NotImplementedError()))[0]["problem"]
    with pytest.raises(KeyError, match="no shown case"):
        ch6.try_schedule(schedule, "nope")


@pytest.mark.parametrize("name", [*SCHEDULE_WRONG, "raises", "stub"])
@pytest.mark.usefixtures("zh_tw")
def test_schedule_explains_in_zh_tw(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = {**SCHEDULE_WRONG, "raises": lambda state: state.running[99], "stub": lambda state: None}[name]
    assert ch6.check_schedule(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith(("✗ schedule（排程器的一步）：未通過", "○ schedule（排程器的一步）：尚未作答")), out
    assert untranslated(out) == []


@pytest.mark.usefixtures("zh_tw")
def test_schedule_hints_and_the_schedulers_refusals_read_in_zh_tw(capsys: pytest.CaptureFixture[str]) -> None:
    ch6.check_schedule(SCHEDULE_WRONG["preempts the oldest"])
    out = capsys.readouterr().out   # the answer key's description was made in English by the tests above: still zh
    assert "第 2 步（這一步之前：執行中（最舊的在前，已計算/token 數）[A 8/9、B 9/10、C 10/11]；等待中 [無]" in out
    assert "搶佔最新的執行中序列（state.running[-1]，也就是最後被允入的）；應依序搶佔 ['C']，卻得到 ['A']" in out
    ch6.check_schedule(SCHEDULE_WRONG["ignores the token budget"])    # the Scheduler's own refusal, read back
    assert "排程策略 _solution_with.<locals>.policy 規劃了 11 個 token，超出 token 預算 10" in capsys.readouterr().out
    problem = ch6.try_schedule(SCHEDULE_WRONG["advances the counts itself"], 0)[-1]["problem"]
    assert str(problem).startswith("策略把 A 的 num_computed_tokens 從 7 改成了 8。不要自己改動")


def _serve(policy) -> tuple[list, list, int]:
    """A workload with preemptions and forked samples on the engine, with the stand-in runner and ``policy``."""
    memory = BlockManager(14, 4)
    engine = LLMEngine(StandInRunner(100), memory=memory, max_seq_len=64, max_num_seqs=8, max_num_batched_tokens=12,
                       **({} if policy is None else {"schedule": policy}))
    lengths = [(9, 7, 1), (5, 9, 2), (13, 4, 1), (3, 11, 1), (7, 6, 3), (10, 8, 1)]
    for i, (prompt, max_tokens, n) in enumerate(lengths):
        engine.add_request(list(range(i, i + prompt)), SamplingParams(max_tokens=max_tokens, n=n))
    steps, outputs = [], []
    while engine.has_unfinished:
        outputs += engine.step()
        step = engine.last_step
        steps.append(([(s.seq.seq_id, s.num_new_tokens) for s in step.scheduled], [s.seq_id for s in step.preempted],
                      [s.seq_id for s in step.admitted], {k: t.block_ids for k, t in memory.tables.items()}))
    finished = sorted((o.request_id, [c.token_ids for c in o.completions], [c.finish_reason for c in o.completions])
                      for o in outputs)
    return finished, steps, engine.scheduler.num_preemptions


def test_a_passing_policy_is_a_drop_in_for_the_engine() -> None:
    shipped = _serve(None)
    assert shipped[2] >= 2 and len(shipped[0]) == 6                 # memory ran short: the workload preempts
    assert _serve(_schedule_indexed) == shipped


# --- your scheduler as a file: graded, marked passed, and run by the engine on SmolLM2 -------------
SMOLLM2_PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time,", "Water boils at",
                   "The sky is blue because")


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m")


def _serve_smollm2(loaded, policy) -> tuple[list[list[int]], list[tuple], int]:
    """Five greedy prompts in ten blocks of 4 (the chapter's run): tokens, every step's decisions, preemptions."""
    engine = LLMEngine(loaded.model, loaded.tokenizer, schedule=policy, kv_budget_tokens=40, block_size=4,
                       stop_token_ids=loaded.stop_token_ids)
    for text in SMOLLM2_PROMPTS:
        engine.add_request(loaded.tokenizer(text)["input_ids"], SamplingParams(max_tokens=6))
    tokens, steps = {}, []
    while engine.has_unfinished:
        for out in engine.step():
            tokens[out.request_id] = out.completions[0].token_ids
        step = engine.last_step
        steps.append(([(s.seq.seq_id, s.num_new_tokens, s.new_block_ids) for s in step.scheduled],
                      [s.seq_id for s in step.preempted], [s.seq_id for s in step.admitted]))
    return [tokens[i] for i in range(len(SMOLLM2_PROMPTS))], steps, engine.scheduler.num_preemptions


def _scheduler_choice(parts: my_engine.Parts) -> my_engine.Choice:
    return next(c for c in parts.card.choices if c.part.name == "scheduler")


def test_a_passing_file_is_marked_and_serves_smollm2_as_the_shipped_policy_does(
        tmp_path: Path, smollm2, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / my_engine.PARTS["scheduler"].path().name
    path.write_text(sol6.scheduler_file())
    assert my_engine.load_parts(tmp_path, quiet=True).card.yours == []          # written, not graded yet
    assert ch6.check_schedule(path) is True
    assert f"{path} is marked passed" in capsys.readouterr().out
    assert my_engine.why_not_passed(path, "6") is None
    parts = my_engine.load_parts(tmp_path, quiet=True)
    assert parts.card.yours == ["scheduler"] and parts.schedule is not schedule   # the file's own function
    assert parts.schedule.__module__.startswith("reader_")

    yours, shipped = _serve_smollm2(smollm2, parts.schedule), _serve_smollm2(smollm2, None)
    assert yours == shipped and shipped[2] >= 1                      # same tokens, same steps; memory ran short
    for text, tokens in zip(SMOLLM2_PROMPTS, yours[0]):              # and transformers' greedy decoding agrees
        ids = torch.tensor([smollm2.tokenizer(text)["input_ids"]], device=smollm2.hf_model.device)
        assert smollm2.hf_model.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1]:].tolist() == tokens

    path.write_text(path.read_text() + "\n# an edit after passing\n")
    choice = _scheduler_choice(my_engine.load_parts(tmp_path, quiet=True))
    assert not choice.yours and choice.value is schedule and "changed since it passed chapter 6" in choice.why


def test_a_file_that_failed_is_not_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = sol6.scheduler_file()
    assert source.count("state.running[-1]") == 1
    path = tmp_path / "scheduler.py"
    path.write_text(source.replace("state.running[-1]", "state.running[0]"))   # preempts the oldest
    assert ch6.check_schedule(path) is False
    assert "preempt the newest running sequence" in capsys.readouterr().out
    assert not path.with_name("scheduler.py.passed").exists()
    parts = my_engine.load_parts(tmp_path, quiet=True)
    assert parts.schedule is schedule and parts.card.yours == []
    assert "has not passed chapter 6's grader yet" in _scheduler_choice(parts).why


def test_the_file_grader_names_what_is_wrong_with_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "scheduler.py"
    assert ch6.check_schedule(path) is False
    assert "does not exist: run the %%writefile cell above" in capsys.readouterr().out
    for text, message in (("def schedule(state:\n", "raised SyntaxError"),
                          ("import no_such_module\n", "raised ModuleNotFoundError"),
                          ("def schedul(state):\n    return {}\n", "defines no function schedule(state)"),
                          ("from pagedkv_edu.core.scheduler import schedule\n", "instead of defining its own")):
        path.write_text(text)
        assert ch6.check_schedule(path) is False
        out = capsys.readouterr().out
        assert out.startswith("✗ schedule（排程器的一步）: failed") and message in out, out
        assert not path.with_name("scheduler.py.passed").exists()
    path.write_text("def schedule(state):\n    raise NotImplementedError  # YOUR CODE HERE\n")   # the stub
    assert ch6.check_schedule(path) is False
    assert capsys.readouterr().out.startswith("○ schedule（排程器的一步）: not solved yet")
    assert not path.with_name("scheduler.py.passed").exists()
    path.write_text(sol6.scheduler_file())
    rows = ch6.try_schedule(path, 0)
    assert rows and not any(r["problem"] for r in rows)
    with pytest.raises(ValueError, match="does not exist"):
        ch6.try_schedule(tmp_path / "missing.py")
