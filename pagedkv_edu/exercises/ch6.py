"""Graders for chapter 6: the admission test (the warm-up), then the scheduler's whole step.

``check_can_admit`` catches the slips of the admission arithmetic (rounding down, the
watermark forgotten or applied when nothing runs, the exact fit). ``check_schedule`` runs the
reader's ``schedule(state)`` on seeded traces against the package's
:class:`~pagedkv_edu.core.scheduler.Scheduler`, step by step; the engine's part around a step is
the harness's (:class:`_Trace`). Hidden traces use block sizes that are not powers of two.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.block_manager import BlockManager
from ..core.scheduler import Scheduler
from .ch2 import HIDDEN_BLOCK_SIZES
from .grading import ArgsCase, Reader, as_bool, as_int, grade, short
from .solutions import ch6 as reference

# (name, num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)
ADMIT_CASES: tuple[tuple[str, int, int, int, int, int], ...] = (
    ("fits with room to spare", 40, 16, 10, 1, 3),
    ("41 tokens need 3 blocks, not 2", 41, 16, 2, 0, 1),
    ("an exact fit without watermark", 48, 16, 3, 0, 2),
    ("an exact fit, but the watermark must stay free", 48, 16, 3, 1, 2),
    ("the whole pool, nothing running: the watermark does not apply", 64, 16, 4, 1, 0),
    ("one block short", 65, 16, 4, 0, 0),
    ("block size 1", 7, 1, 8, 1, 5),
)


def _hidden_admit_cases(count: int = 300, seed: int = 7) -> list[ArgsCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        tokens = rng.choice([1, b, 2 * b, 3 * b + 1, rng.randint(1, 20 * b)])
        watermark = rng.choice([0, 1, 1, 2, 3])
        running = rng.choice([0, 1, 1, 1, 2, rng.randint(3, 9)])
        need = -(-tokens // b)
        free = max(0, need + rng.choice([0, watermark, watermark - 1, watermark + 1, -1, rng.randint(-3, 6)]))
        cases.append(ArgsCase(f"hidden case {i + 1}", (tokens, b, free, watermark, running)))
    return cases


HIDDEN_ADMIT_CASES = _hidden_admit_cases()


def _run_admit(fn: Reader, case: ArgsCase) -> list[str]:
    expected = reference.can_admit(*case.args)
    got = fn(*case.args)
    value = as_bool(got)
    tokens, b, free, watermark, running = case.args
    inputs = f"tokens={tokens}, B={b}, free={free}, watermark={watermark}, running={running}"
    if value is None:
        return [f"({inputs}): got {short(got)}, expected {expected}: the answer is True or False"]
    if value == expected:
        return []
    need = -(-tokens // b)
    return [f"({inputs}): got {value}, expected {expected} ({tokens} tokens at block size {b} take {need} "
            f"block{'s' if need != 1 else ''}; {running} request{'s' if running != 1 else ''} running)"]


def check_can_admit(fn: Callable[[int, int, int, int, int], bool]) -> bool:
    """Grade ``fn(num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)``."""
    shown = [ArgsCase(name, tuple(args)) for name, *args in ADMIT_CASES]
    return grade("can_admit（允入判斷）", fn, shown, HIDDEN_ADMIT_CASES, _run_admit, constant_is_stub=True)


# --- the scheduler's step -------------------------------------------------------------------------
@dataclass(eq=False)
class Seq:
    """A sequence as the step sees it. Equal only to itself, so it can be a key of the returned plan."""

    seq_id: str
    num_tokens: int          # prompt plus the tokens generated so far
    num_computed: int = 0    # tokens whose K/V are in memory (0 while it waits)
    num_seqs: int = 1        # seats under max_num_seqs: n for a request whose n samples are not forked yet
    max_tokens: int = 1      # the harness's: it finishes after generating this many
    generated: int = 0       # the harness's: tokens generated so far

    def __repr__(self) -> str:
        return f"Seq({self.seq_id!r}, {self.num_computed}/{self.num_tokens} computed)"


class Memory:
    """The paged KV memory the step asks: the engine's :class:`~pagedkv_edu.core.block_manager.BlockManager` underneath.

    ``can_admit`` keeps the watermark free for the running sequences (none when nothing runs).
    """

    def __init__(self, num_blocks: int, block_size: int, watermark_blocks: int = 0) -> None:
        self.manager = BlockManager(num_blocks, block_size, watermark_blocks=watermark_blocks)
        self.calls: list[tuple[str, str]] = []   # (what, seq_id) in call order, for the grader's diagnosis

    @property
    def num_free_blocks(self) -> int:
        return self.manager.pool.num_free

    def block_table(self, seq: Seq) -> list[int]:
        return list(self.manager.table(seq.seq_id).block_ids)

    def can_grow(self, seq: Seq, n: int) -> bool:
        """Would ``n`` more tokens of running ``seq`` fit in the free blocks?"""
        self._check(seq, n, admitted=True)
        return self.manager.can_grow(seq.seq_id, n)

    def grow(self, seq: Seq, n: int) -> None:
        """Take the blocks for ``n`` more tokens of running ``seq``."""
        self._check(seq, n, admitted=True)
        self.calls.append(("grow", seq.seq_id))
        self.manager.grow(seq.seq_id, n)

    def can_admit(self, seq: Seq, n: int) -> bool:
        """Would the first ``n`` tokens of waiting ``seq`` fit, with the watermark left free?"""
        self._check(seq, n, admitted=False)
        return self.manager.can_admit(seq.seq_id, n)

    def admit(self, seq: Seq, n: int) -> None:
        """Take the blocks for the first ``n`` tokens of waiting ``seq``."""
        self._check(seq, n, admitted=False)
        self.calls.append(("admit", seq.seq_id))
        self.manager.admit(seq.seq_id, n)

    def release(self, seq: Seq) -> None:
        """Give back every block of ``seq`` (it finished, or it is preempted)."""
        if seq.seq_id not in self.manager.tables:
            raise ValueError(f"{seq.seq_id!r} holds no memory: it is not running")
        self.calls.append(("release", seq.seq_id))
        self.manager.release(seq.seq_id)

    def _check(self, seq: Seq, n: int, *, admitted: bool) -> None:
        if not isinstance(seq, Seq):
            raise TypeError(f"expected a Seq from state.running or state.waiting, got {short(seq)}")
        if as_int(n) is None or n < 1:
            raise ValueError(f"{seq.seq_id!r}: n={short(n)} tokens; it must be a whole number >= 1")
        live = seq.seq_id in self.manager.tables
        if admitted and not live:
            raise ValueError(f"{seq.seq_id!r} is not running (it holds no memory): admit it before it can grow")
        if not admitted and live:
            raise ValueError(f"{seq.seq_id!r} is running already: grow it, do not admit it again")
        have = self.manager.table(seq.seq_id).num_tokens if live else 0
        if have + n > seq.num_tokens:
            raise ValueError(f"{seq.seq_id!r} has {seq.num_tokens} tokens and {have} in memory: "
                             f"{int(n)} more would be tokens it does not have")


@dataclass
class SchedulerState:
    """What one step decides over: the queues, the memory, and the step's two limits."""

    running: list[Seq]        # the batch, oldest admission first
    waiting: deque[Seq]       # first come first served; a preempted sequence goes back to the front
    memory: Memory
    token_budget: int         # tokens one step may compute (vLLM's max_num_batched_tokens)
    max_num_seqs: int         # seats one step may run


@dataclass(frozen=True)
class SchedCase:
    """A seeded trace: requests ``(id, prompt_len, max_tokens, n, arrival_step)`` on a pool and two limits."""

    name: str
    block_size: int
    num_blocks: int
    requests: tuple[tuple[str, int, int, int, int], ...]
    token_budget: int = 10_000
    max_num_seqs: int = 64
    watermark_blocks: int = 0


SCHEDULE_CASES: tuple[SchedCase, ...] = (
    SchedCase("the chapter's pool: 8 blocks of 4, prompts of 7, 8 and 9 tokens", 4, 8,
              (("A", 7, 6, 1, 0), ("B", 8, 6, 1, 0), ("C", 9, 6, 1, 0))),
    SchedCase("a token budget of 10: a 25-token prompt is prefilled in chunks beside the decodes", 4, 32,
              (("A", 6, 8, 1, 0), ("B", 5, 8, 1, 0), ("long", 25, 3, 1, 1), ("D", 4, 3, 1, 2)), token_budget=10),
    SchedCase("max_num_seqs=2: the third request waits for a seat", 4, 32,
              (("A", 5, 3, 1, 0), ("B", 6, 5, 1, 0), ("C", 4, 3, 1, 0)), max_num_seqs=2),
    SchedCase("a request with n=3 samples takes 3 seats from its admission (max_num_seqs=4)", 4, 32,
              (("par", 6, 4, 3, 0), ("B", 5, 3, 1, 0), ("C", 5, 3, 1, 0)), max_num_seqs=4),
    SchedCase("block size 5, a watermark of 1 block, and preemptions while a queue waits", 5, 9,
              (("A", 9, 8, 1, 0), ("B", 11, 7, 1, 0), ("C", 6, 9, 1, 0), ("D", 8, 4, 1, 1), ("E", 3, 5, 1, 2)),
              watermark_blocks=1),
)


def _hidden_schedule_cases(count: int = 40, seed: int = 11) -> list[SchedCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        reqs = []
        for j in range(rng.randint(4, 9)):
            n = rng.choice([1, 1, 1, 1, 2, 3])
            reqs.append((f"r{j}", rng.randint(1, 6 * b), rng.randint(1, 3 * b + 2), n, rng.choice([0, 0, 1, 2, 5])))
        need = max(n * -(-(p + m) // b) for _, p, m, n, _ in reqs)   # every request fits the pool alone
        num_blocks = need + rng.randint(0, need // 2)
        budget = rng.choice([10_000, rng.randint(1, 3 * b), rng.randint(b, 8 * b)])
        seats = max(n for *_, n, _ in reqs) + rng.choice([0, 1, 2, 64])
        cases.append(SchedCase(f"hidden case {i + 1}", b, num_blocks, tuple(sorted(reqs, key=lambda r: r[4])),
                               budget, seats, rng.choice([0, 0, 1, 2])))
    return cases


HIDDEN_SCHEDULE_CASES = _hidden_schedule_cases()
MAX_STEPS = 500


@dataclass(frozen=True)
class StepView:
    """One step of a trace, before and after: what the grader compares and ``try_schedule`` returns."""

    step: int
    before: str                          # the queues and free blocks the step saw
    scheduled: dict[str, int]            # tokens each sequence computes, in the order scheduled
    preempted: tuple[str, ...]
    admitted: tuple[str, ...]
    tables: dict[str, tuple[int, ...]]   # every live block table after the step
    waiting: tuple[str, ...]             # the queue after the step, front first
    calls: tuple[tuple[str, str], ...] = ()   # the reader's memory calls, in order
    seats: int = 0                             # seats taken once the step's admissions are in


def _describe(running: Sequence[Seq], waiting: Sequence[Seq], free: int, case: SchedCase) -> str:
    run = ", ".join(f"{s.seq_id} {s.num_computed}/{s.num_tokens}" for s in running) or "none"
    wait = ", ".join(f"{s.seq_id} ({s.num_tokens} tokens{', n=' + str(s.num_seqs) if s.num_seqs > 1 else ''})"
                     for s in waiting) or "none"
    return (f"running (oldest first, computed/tokens) [{run}]; waiting [{wait}]; {free} free blocks of "
            f"{case.block_size}; token budget {case.token_budget}, max_num_seqs {case.max_num_seqs}, "
            f"watermark {case.watermark_blocks}")


class _Trace:
    """The engine's part around one step: arrivals, then after the step sampling, forking and finishing."""

    def __init__(self, case: SchedCase) -> None:
        self.case = case
        self.arrivals = [Seq(r, p, 0, n, m) for r, p, m, n, _ in case.requests]
        self.arrive_at = {r: a for r, *_, a in case.requests}
        self.forks: dict[str, int] = {r: n for r, _, _, n, _ in case.requests}

    def arriving(self, step: int) -> list[Seq]:
        out = [s for s in self.arrivals if self.arrive_at[s.seq_id] == step]
        return out

    def after(self, scheduled: dict[Seq, int], preempted: Sequence[Seq],
              fork: Callable[[Seq, Seq], None], finish: Callable[[Seq], None]) -> None:
        for seq in preempted:
            seq.num_computed = 0
        for seq, n in list(scheduled.items()):
            seq.num_computed += n
            if seq.num_computed < seq.num_tokens:
                continue               # a chunk of a prompt: no token yet
            samples = [seq]
            if seq.num_seqs > 1:       # its prefill is done: fork its samples, which share its blocks
                seq.num_seqs = 1
                for i in range(1, self.forks[seq.seq_id]):
                    child = Seq(f"{seq.seq_id}.{i}", seq.num_tokens, seq.num_computed, 1, seq.max_tokens)
                    fork(seq, child)
                    samples.append(child)
            for s in samples:
                s.num_tokens += 1
                s.generated += 1
                if s.generated == s.max_tokens:
                    finish(s)


def _reference_run(case: SchedCase) -> list[StepView]:
    """The package's :class:`~pagedkv_edu.core.scheduler.Scheduler` on the trace: the answer key."""
    trace = _Trace(case)
    memory = BlockManager(case.num_blocks, case.block_size, watermark_blocks=case.watermark_blocks)
    scheduler = Scheduler(memory, case.max_num_seqs, case.token_budget)
    views = []
    for step in range(MAX_STEPS):
        for seq in trace.arriving(step):
            scheduler.add(seq)
        if not scheduler.has_unfinished and step > max(trace.arrive_at.values()):
            return views
        before = _describe(scheduler.running, scheduler.waiting, memory.pool.num_free, case)
        decided = scheduler.schedule()
        assert not decided.failed, case.name
        plan = {s.seq: s.num_new_tokens for s in decided.scheduled}
        trace.after(plan, decided.preempted, scheduler.fork, scheduler.finish)
        views.append(StepView(step, before, {s.seq_id: n for s, n in plan.items()},
                              tuple(s.seq_id for s in decided.preempted), tuple(s.seq_id for s in decided.admitted),
                              _tables(memory), tuple(s.seq_id for s in scheduler.waiting)))
    raise AssertionError(f"{case.name}: the reference did not finish in {MAX_STEPS} steps")


def _tables(memory: BlockManager) -> dict[str, tuple[int, ...]]:
    return {k: tuple(t.block_ids) for k, t in memory.tables.items()}


def _plan(result: Any, state: SchedulerState, everyone: dict[str, Seq]) -> tuple[dict[Seq, int] | None, str]:
    """The reader's answer as ``{seq: tokens}``: a mapping or pairs, keyed by a Seq or its id."""
    if result is None:
        return None, "it returned None: return the plan, {seq: tokens computed in this step}"
    pairs = result.items() if isinstance(result, Mapping) else result
    try:
        pairs = list(pairs)
    except TypeError:
        return None, f"got {short(result)}: return a dict {{seq: tokens}} (or a list of (seq, tokens) pairs)"
    plan: dict[Seq, int] = {}
    for pair in pairs:
        try:
            key, n = pair
        except (TypeError, ValueError):
            return None, f"the plan holds {short(pair)}, not a (seq, tokens) pair"
        seq = key if isinstance(key, Seq) else everyone.get(key) if isinstance(key, str) else None
        if seq is None:
            return None, f"the plan names {short(key)}: name a Seq (or its seq_id)"
        tokens = as_int(n)
        if tokens is None or tokens < 1:
            return None, f"{seq.seq_id}: {short(n)} tokens; each scheduled sequence computes a whole number >= 1"
        if seq in plan:
            return None, f"{seq.seq_id} is scheduled twice in one step"
        plan[seq] = tokens
    return plan, ""


def _reader_step(fn: Callable[[SchedulerState], Any], case: SchedCase, trace: _Trace, state: SchedulerState, everyone: dict[str, Seq],
                 step: int) -> tuple[StepView | None, str]:
    memory = state.memory
    before_running = list(state.running)
    before = _describe(state.running, state.waiting, memory.num_free_blocks, case)
    memory.calls = []
    result = fn(state)
    plan, why = _plan(result, state, everyone)
    if plan is None:
        return None, why
    released = [i for what, i in memory.calls if what == "release"]
    if released and any(what == "admit" for what, _ in memory.calls[memory.calls.index(("release", released[0])):]):
        return None, (f"you preempted {released} and then admitted in the same step: a step that preempted "
                      f"admits nobody (memory is short: the preempted go first next step)")
    for seq in plan:
        if seq not in state.running:
            return None, f"{seq.seq_id} is in the plan but not in state.running after the step"
        table = memory.manager.table(seq.seq_id)
        if table.num_tokens != seq.num_computed * (seq in before_running) + plan[seq]:
            return None, (f"{seq.seq_id} computes {plan[seq]} tokens in the plan, but its memory holds "
                          f"{table.num_tokens} tokens (it had {seq.num_computed} computed): grow or admit exactly "
                          f"the tokens you schedule")
    released = [everyone[i] for what, i in memory.calls if what == "release"]   # preemption order
    preempted = [s for s in released if s in before_running and s not in state.running]
    preempted += [s for s in before_running if s not in state.running and s not in preempted]
    admitted = [s for s in state.running if s not in before_running]
    calls = tuple(memory.calls)
    seats = sum(s.num_seqs for s in state.running)

    def finish(s: Seq) -> None:
        memory.release(s)
        state.running.remove(s)

    def fork(parent: Seq, child: Seq) -> None:
        memory.manager.fork(parent.seq_id, child.seq_id)
        state.running.append(child)
        everyone[child.seq_id] = child

    trace.after(plan, preempted, fork, finish)
    memory.manager.take_copies()
    return StepView(step, before, {s.seq_id: n for s, n in plan.items()}, tuple(s.seq_id for s in preempted),
                    tuple(s.seq_id for s in admitted), _tables(memory.manager), tuple(s.seq_id for s in state.waiting),
                    calls, seats), ""


def _diagnose(got: StepView, want: StepView, case: SchedCase) -> str:
    """What went wrong in a step, in the words of the rule it broke (a hint only when it is the cause)."""
    tokens = sum(got.scheduled.values())
    if tokens > case.token_budget:
        return f"the step computes {tokens} tokens, over the token budget of {case.token_budget}: chunk the prompt"
    if want.preempted and got.admitted:
        return f"a step that preempted admits nobody (memory is short: the preempted go first next step)"
    grown = [i for what, i in got.calls if what == "grow"]
    first_admit = next((k for k, (what, _) in enumerate(got.calls) if what == "admit"), None)
    should_grow = [i for i in want.scheduled if i not in want.admitted]
    if first_admit is not None and any(i not in grown or got.calls.index(("grow", i)) > first_admit
                                       for i in should_grow):
        return "grow the running sequences first, then admit: a sequence just admitted must not crowd out the running"
    if got.preempted != want.preempted and want.preempted:
        return (f"preempt the newest running sequence (the last admitted) and put it at the front of the queue; "
                f"expected {list(want.preempted)} preempted in that order, got {list(got.preempted)}")
    if got.seats > case.max_num_seqs:
        return (f"the step runs {got.seats} seats, over max_num_seqs={case.max_num_seqs}: count seats, and a request "
                f"with n samples takes n seats until they are forked (then each sample takes one)")
    if got.admitted != want.admitted:
        extra = [s for s in got.admitted if s not in want.admitted]
        if extra and want.waiting and want.waiting[0] not in got.admitted:
            return (f"the head of the queue, {want.waiting[0]}, cannot be admitted, so it blocks the ones behind it "
                    f"(first come first served: nobody starves); you admitted {extra}")
        return f"expected {list(want.admitted)} admitted, first come first served, got {list(got.admitted)}"
    if got.waiting != want.waiting:
        return f"the waiting queue after the step should be {list(want.waiting)} (front first), got {list(got.waiting)}"
    return ""


def _run_schedule(fn: Reader, case: SchedCase) -> list[str]:
    want = _reference_run(case)
    trace = _Trace(case)
    state = SchedulerState([], deque(), Memory(case.num_blocks, case.block_size, case.watermark_blocks),
                           case.token_budget, case.max_num_seqs)
    everyone = {s.seq_id: s for s in trace.arrivals}
    for expected in want:
        state.waiting.extend(trace.arriving(expected.step))
        got, why = _reader_step(fn, case, trace, state, everyone, expected.step)
        where = f"step {expected.step} (before it: {expected.before})"
        if got is None:
            return [where, why]
        fields = ("scheduled", "preempted", "admitted", "tables", "waiting")
        wrong = [f for f in fields if getattr(got, f) != getattr(expected, f)]
        if wrong:
            lines = [where] + [f"{f}: got {short(getattr(got, f), 200)}, expected {short(getattr(expected, f), 200)}"
                               for f in wrong]
            hint = _diagnose(got, expected, case)
            return lines + ([hint] if hint else [])
    if state.running or state.waiting:
        return [f"after step {want[-1].step} the reference is done; still running or waiting: "
                f"{[s.seq_id for s in [*state.running, *state.waiting]]}"]
    return []


def check_schedule(fn: Callable[[SchedulerState], Any]) -> bool:
    """Grade ``fn(state) -> {seq: tokens}`` step by step against the package's ``Scheduler``, same block tables."""
    return grade("schedule（排程器的一步）", fn, SCHEDULE_CASES, HIDDEN_SCHEDULE_CASES, _run_schedule)


def try_schedule(fn: Callable[[SchedulerState], Any], case: str | int = 0) -> list[dict[str, Any]]:
    """Run ``fn`` on one shown case (by name or index): every step's input, your decisions and the expected ones.

    Stops after the first step that differs. Nothing is graded or printed.
    """
    chosen = SCHEDULE_CASES[case] if isinstance(case, int) else next(
        (c for c in SCHEDULE_CASES if c.name == case), None)
    if chosen is None:
        raise KeyError(f"no shown case {case!r}; the cases are {[c.name for c in SCHEDULE_CASES]}")
    want = _reference_run(chosen)
    trace = _Trace(chosen)
    state = SchedulerState([], deque(), Memory(chosen.num_blocks, chosen.block_size, chosen.watermark_blocks),
                           chosen.token_budget, chosen.max_num_seqs)
    everyone = {s.seq_id: s for s in trace.arrivals}
    rows = []
    for expected in want:
        state.waiting.extend(trace.arriving(expected.step))
        got, why = _reader_step(fn, chosen, trace, state, everyone, expected.step)
        rows.append({"step": expected.step, "before": expected.before, "yours": got, "expected": expected,
                     "problem": why})
        if got is None or any(getattr(got, f) != getattr(expected, f)
                              for f in ("scheduled", "preempted", "admitted", "tables", "waiting")):
            break
    return rows
