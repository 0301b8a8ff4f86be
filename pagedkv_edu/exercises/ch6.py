"""Graders for chapter 6: the admission test (the warm-up), then the scheduling policy.

``check_can_admit`` catches the slips of the admission arithmetic (rounding down, the
watermark forgotten or applied when nothing runs, the exact fit). ``check_schedule`` runs the
reader's ``schedule(state)`` as the policy of the package's own
:class:`~pagedkv_edu.core.scheduler.Scheduler` (``Scheduler(memory, ..., schedule=fn)``, what
``LLMEngine(..., schedule=fn)`` builds), so a function that passes is a drop-in policy; it compares
every step with the shipped policy on seeded traces. Hidden traces use block sizes that are not
powers of two. Given the path of the reader's file (``my_engine/scheduler.py``, which the chapter's
``%%writefile`` cell saves), it grades the ``schedule`` that file defines and, when it passes,
marks the file passed, so that :func:`~pagedkv_edu.exercises.my_engine.load_parts` gives the
engine exactly that file.
"""

from __future__ import annotations

import functools
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..checks import is_whole
from ..core.block_manager import BlockManager
from ..core.prefix_cache import NO_HIT, PrefixHit
from ..core.request import Request, SamplingParams, Status
from ..core.scheduler import ScheduledStep, Scheduler, SchedulerState
from .ch2 import HIDDEN_BLOCK_SIZES
from .grading import ArgsCase, Raised, Reader, as_bool, grade, rows_to_first_difference, short
from .messages import Message, tr
from .my_engine import function_in, grade_part
from .solutions import ch6 as reference

# (name, num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)
ADMIT_CASES: tuple[tuple[Message, int, int, int, int, int], ...] = (
    (tr("fits with room to spare"), 40, 16, 10, 1, 3),
    (tr("41 tokens need 3 blocks, not 2"), 41, 16, 2, 0, 1),
    (tr("an exact fit without watermark"), 48, 16, 3, 0, 2),
    (tr("an exact fit, but the watermark must stay free"), 48, 16, 3, 1, 2),
    (tr("the whole pool, nothing running: the watermark does not apply"), 64, 16, 4, 1, 0),
    (tr("one block short"), 65, 16, 4, 0, 0),
    (tr("block size 1"), 7, 1, 8, 1, 5),
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
        cases.append(ArgsCase(tr("hidden case {n}", n=i + 1), (tokens, b, free, watermark, running)))
    return cases


HIDDEN_ADMIT_CASES = _hidden_admit_cases()


def _run_admit(fn: Reader, case: ArgsCase) -> list[str]:
    expected = reference.can_admit(*case.args)
    got = fn(*case.args)
    value = as_bool(got)
    tokens, b, free, watermark, running = case.args
    inputs = f"tokens={tokens}, B={b}, free={free}, watermark={watermark}, running={running}"
    if value is None:
        return [tr("({inputs}): got {got}, expected {expected}: the answer is True or False", inputs=inputs,
                   got=short(got), expected=expected)]
    if value == expected:
        return []
    need = -(-tokens // b)
    blocks = (tr("{tokens} tokens at block size {b} take {need} block", tokens=tokens, b=b, need=need) if need == 1 else
              tr("{tokens} tokens at block size {b} take {need} blocks", tokens=tokens, b=b, need=need))
    busy = (tr("{running} request running", running=running) if running == 1 else
            tr("{running} requests running", running=running))
    return [tr("({inputs}): got {got}, expected {expected} ({blocks}; {running})", inputs=inputs, got=value,
               expected=expected, blocks=blocks, running=busy)]


def check_can_admit(fn: Callable[[int, int, int, int, int], bool]) -> bool:
    """Grade ``fn(num_tokens, block_size, num_free_blocks, watermark_blocks, num_running)``."""
    shown = [ArgsCase(name, tuple(args)) for name, *args in ADMIT_CASES]
    return grade("can_admit（允入判斷）", fn, shown, HIDDEN_ADMIT_CASES, _run_admit, constant_is_stub=True)


# --- the scheduling policy -------------------------------------------------------------------------
@dataclass(frozen=True)
class SchedCase:
    """A seeded trace: requests ``(id, prompt_len, max_tokens, n, arrival_step)`` on a pool and two limits."""

    name: Message
    block_size: int
    num_blocks: int
    requests: tuple[tuple[str, int, int, int, int], ...]
    token_budget: int = 10_000
    max_num_seqs: int = 64
    watermark_blocks: int = 0


SCHEDULE_CASES: tuple[SchedCase, ...] = (
    SchedCase(tr("the chapter's pool: 8 blocks of 4, prompts of 7, 8 and 9 tokens"), 4, 8,
              (("A", 7, 6, 1, 0), ("B", 8, 6, 1, 0), ("C", 9, 6, 1, 0))),
    SchedCase(tr("a token budget of 10: a 25-token prompt is prefilled in chunks beside the decodes"), 4, 32,
              (("A", 6, 8, 1, 0), ("B", 5, 8, 1, 0), ("long", 25, 3, 1, 1), ("D", 4, 3, 1, 2)), token_budget=10),
    SchedCase(tr("max_num_seqs=2: the third request waits for a seat"), 4, 32,
              (("A", 5, 3, 1, 0), ("B", 6, 5, 1, 0), ("C", 4, 3, 1, 0)), max_num_seqs=2),
    SchedCase(tr("a request with n=3 samples takes 3 seats from its admission (max_num_seqs=4)"), 4, 32,
              (("par", 6, 4, 3, 0), ("B", 5, 3, 1, 0), ("C", 5, 3, 1, 0)), max_num_seqs=4),
    SchedCase(tr("block size 5, a watermark of 1 block, and preemptions while a queue waits"), 5, 9,
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
        cases.append(SchedCase(tr("hidden case {n}", n=i + 1), b, num_blocks, tuple(sorted(reqs, key=lambda r: r[4])),
                               budget, seats, rng.choice([0, 0, 1, 2])))
    return cases


HIDDEN_SCHEDULE_CASES = _hidden_schedule_cases()
MAX_STEPS = 500


class Call(NamedTuple):
    """One call the scheduler's memory answered, in call order: ``grow``, ``admit`` or ``release``."""

    what: str
    seq_id: str
    tokens: int = 0          # the tokens asked for (0 for a release)
    granted: bool = True     # False: memory said no (None) and changed nothing


@dataclass(frozen=True)
class StepView:
    """One step of a trace, before and after: what the grader compares and ``try_schedule`` returns."""

    step: int
    before: Message                      # the queues and free blocks the step saw
    scheduled: dict[str, int]            # tokens each sequence computes, in the order scheduled
    preempted: tuple[str, ...]           # in the order preempted
    admitted: tuple[str, ...]
    failed: tuple[str, ...]              # sequences the Scheduler gave up on as never fitting
    tables: dict[str, tuple[int, ...]]   # every block table once the step's samples are in
    waiting: tuple[str, ...]             # the queue then, front first
    calls: tuple[Call, ...] = ()         # the policy's memory calls, in order (a preemption is a release)
    running_before: tuple[str, ...] = ()   # the batch the step started from, oldest first


COMPARED = ("scheduled", "preempted", "admitted", "failed", "tables", "waiting")
FIELD_NAMES: dict[str, Message] = {    # what each compared field is shown as: the StepView's name, in the reader's words
    "scheduled": tr("scheduled"), "preempted": tr("preempted"), "admitted": tr("admitted"), "failed": tr("failed"),
    "tables": tr("tables"), "waiting": tr("waiting")}


def _compared(view: StepView, name: str) -> Any:
    """A field as compared: the plan's order counts (the batch's rows), a table's order does not."""
    value = getattr(view, name)
    return tuple(value.items()) if name == "scheduled" else value


class _LoggedMemory:
    """The grader's wrapper around the BlockManager the Scheduler is given: it logs grants and releases in order.

    Everything else (``lookup``, ``fits``, ``fork``, ``pool``, ``block_size``, ...) is the
    manager's. The Scheduler frees a preempted sequence through ``release`` too, so the log shows
    the order of growing, preempting and admitting within a step.
    """

    def __init__(self, manager: BlockManager) -> None:
        self.manager = manager
        self.calls: list[Call] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def grow(self, seq: Request, num_new_tokens: int) -> list[int] | None:
        ids = self.manager.grow(seq, num_new_tokens)
        self.calls.append(Call("grow", seq.seq_id, num_new_tokens, ids is not None))
        return ids

    def admit(self, seq: Request, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> list[int] | None:
        ids = self.manager.admit(seq, num_new_tokens, hit)
        self.calls.append(Call("admit", seq.seq_id, num_new_tokens, ids is not None))
        return ids

    def release(self, seq: Request) -> list[int]:
        self.calls.append(Call("release", seq.seq_id))
        return self.manager.release(seq)


class _Refused(Exception):
    """The grader stops at this step: ``message`` says what happened, ``hint`` (if any) the rule it breaks
    (each a :class:`~.messages.Message` where the grader wrote it, printed in the reader's language)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


COUNT_HINT = tr("leave seq.num_computed_tokens alone: the Scheduler advances it by the planned tokens after the "
                "policy returns, and state.preempt sets a recomputed victim's to 0")


class _Audited:
    """The reader's policy as the Scheduler calls it, checked for what the Scheduler's own check does not see.

    ``_check_plan`` compares the plan with what memory granted, after the policy returns: by then
    a count the policy changed is overwritten and blocks it freed by hand leave no trace, and a
    token count of 3.0 passes (it equals the grant) and then breaks the record it is added to.
    """

    def __init__(self, policy: Callable[[SchedulerState], Any], memory: _LoggedMemory) -> None:
        self.policy, self.memory = policy, memory
        self.plan: Any = None
        inner = getattr(policy, "fn", policy)     # the reader's function inside the grader's Reader
        self.__qualname__ = getattr(inner, "__qualname__", type(inner).__name__)   # the name the Scheduler's messages use

    def __call__(self, state: SchedulerState) -> Any:
        before = [(s, s.status, s.num_computed_tokens) for s in (*state.running, *state.waiting)]
        self.plan = None
        try:
            self.plan = self.policy(state)
        except Raised as error:
            raise _Refused(error.args[0], COUNT_HINT if _changed_count(before) else "") from None
        preempted = {s.seq_id for s, _, _ in before if s.status is Status.PREEMPTED}
        by_hand = [c.seq_id for c in self.memory.calls if c.what == "release" and c.seq_id not in preempted]
        if by_hand:
            raise _Refused(tr("the policy freed {seqs} with state.memory.release", seqs=by_hand),
                           tr("take memory from a running sequence only with state.preempt(victim): it frees the "
                              "blocks, sets the count to 0 and puts the victim at the front of state.waiting"))
        changed = _changed_count(before)
        if changed:
            raise _Refused(changed, COUNT_HINT)
        if isinstance(self.plan, dict):
            odd = [(getattr(s, "seq_id", s), n) for s, n in self.plan.items() if not is_whole(n)]
            if odd:
                raise _Refused(tr("the plan gives {odd}: the tokens are ints, which the Scheduler adds to "
                                  "seq.num_computed_tokens", odd=short(odd)))
        return self.plan


def _changed_count(before: list[tuple[Request, Status, int]]) -> Message | str:
    """Which count the policy changed: a victim's becomes 0 (recomputed), every other stays as it was."""
    for seq, status, count in before:
        expected = 0 if status is Status.RUNNING and seq.status is Status.PREEMPTED else count
        if seq.num_computed_tokens != expected:
            if expected != count:
                return tr("the policy changed {seq}'s num_computed_tokens from {count} to {now} (it was preempted: 0)",
                          seq=seq.seq_id, count=count, now=seq.num_computed_tokens)
            return tr("the policy changed {seq}'s num_computed_tokens from {count} to {now}", seq=seq.seq_id,
                      count=count, now=seq.num_computed_tokens)
    return ""


class _Trace:
    """The engine's part of a trace: its records, when each arrives, and sampling, forking and finishing between steps."""

    def __init__(self, case: SchedCase) -> None:
        self.arrivals: list[tuple[int, Request]] = []
        for seq_id, prompt, max_tokens, n, arrival in case.requests:
            seq = Request(seq_id, None, SamplingParams(max_tokens=max_tokens, n=n), num_prompt_tokens=prompt)
            seq.num_seqs = n     # n seats until its samples are forked
            self.arrivals.append((arrival, seq))
        self.last_arrival = max(a for a, _ in self.arrivals)

    def arriving(self, step: int) -> list[Request]:
        return [seq for arrival, seq in self.arrivals if arrival == step]

    @staticmethod
    def after(step: ScheduledStep, scheduler: Scheduler) -> None:
        """Every sequence whose tokens are all computed samples one (a prompt's chunk does not), as the engine does."""
        for s in step.scheduled:
            if not s.samples:
                continue
            samples = [s.seq]
            if s.seq.num_seqs > 1:     # its prefill is done: fork its samples, which share its blocks
                s.seq.num_seqs = 1
                for i in range(1, s.seq.params.n):
                    child = s.seq.fork(f"{s.seq.seq_id}.{i}", i)
                    scheduler.fork(s.seq, child)
                    samples.append(child)
            for seq in samples:
                seq.output_token_ids.append(0)
                if len(seq.output_token_ids) == seq.params.max_tokens:
                    scheduler.finish(seq)


def _listed(items: list[Any]) -> Message | str:
    """``a, b, c`` (``none`` for no items) that renders in the language it is printed in, however long it is kept:
    the answer key's descriptions are made once and printed in the reader's language of the moment."""
    if not items:
        return tr("none")
    listed = items[0]
    for item in items[1:]:
        listed = tr("{items}, {item}", items=listed, item=item)
    return listed


def _waiting(seq: Request) -> Message:
    preempted, fields = seq.status is Status.PREEMPTED, {"seq": seq.seq_id, "tokens": seq.num_tokens}
    if seq.num_seqs > 1:
        if preempted:
            return tr("{seq} ({tokens} tokens, n={n}, preempted)", n=seq.num_seqs, **fields)
        return tr("{seq} ({tokens} tokens, n={n})", n=seq.num_seqs, **fields)
    return tr("{seq} ({tokens} tokens, preempted)", **fields) if preempted else tr("{seq} ({tokens} tokens)", **fields)


def _describe(scheduler: Scheduler, memory: BlockManager, case: SchedCase) -> Message:
    return tr("running (oldest first, computed/tokens) [{running}]; waiting [{waiting}]; {free} free blocks of "
              "{block_size}; token budget {budget}, max_num_seqs {seats}, watermark {watermark}",
              running=_listed([f"{s.seq_id} {s.num_computed_tokens}/{s.num_tokens}" for s in scheduler.running]),
              waiting=_listed([_waiting(s) for s in scheduler.waiting]), free=memory.pool.num_free,
              block_size=case.block_size, budget=case.token_budget, seats=case.max_num_seqs,
              watermark=case.watermark_blocks)


class _Run:
    """One trace served by a package Scheduler over a logged BlockManager: the shipped policy, or the reader's."""

    def __init__(self, case: SchedCase, policy: Callable[[SchedulerState], Any] | None = None) -> None:
        self.case, self.trace = case, _Trace(case)
        self.manager = BlockManager(case.num_blocks, case.block_size, watermark_blocks=case.watermark_blocks)
        self.memory = _LoggedMemory(self.manager)
        self.policy = None if policy is None else _Audited(policy, self.memory)
        self.scheduler = Scheduler(self.memory, case.max_num_seqs, case.token_budget,
                                   **({} if self.policy is None else {"schedule": self.policy}))

    def step(self, index: int) -> StepView:
        """Run step ``index``; raises :class:`_Refused` when the policy raised or broke the contract."""
        for seq in self.trace.arriving(index):
            self.scheduler.add(seq)
        before = _describe(self.scheduler, self.manager, self.case)
        running_before = tuple(s.seq_id for s in self.scheduler.running)
        self.memory.calls = []
        try:
            step = self.scheduler.schedule()
        except ValueError as error:   # the Scheduler's check of a reader's plan refused it
            raise _Refused(_scheduler_says(str(error)), _plan_hint(str(error), self.policy, self.scheduler)) from None
        calls = tuple(self.memory.calls)
        self.trace.after(step, self.scheduler)
        return StepView(index, before, {s.seq.seq_id: s.num_new_tokens for s in step.scheduled},
                        tuple(s.seq_id for s in step.preempted), tuple(s.seq_id for s in step.admitted),
                        tuple(s.seq_id for s in step.failed),
                        {k: tuple(t.block_ids) for k, t in self.manager.tables.items()},
                        tuple(s.seq_id for s in self.scheduler.waiting), calls, running_before)

    @property
    def done(self) -> bool:
        return not self.scheduler.has_unfinished


@functools.cache
def _reference_run(case: SchedCase) -> tuple[StepView, ...]:
    """The package's Scheduler with its shipped policy on the trace: the answer key (computed once per case)."""
    run = _Run(case)
    views: list[StepView] = []
    for index in range(MAX_STEPS):
        if run.done and index > run.trace.last_arrival:
            return tuple(views)
        views.append(run.step(index))
        assert not views[-1].failed, case.name
    raise AssertionError(f"{case.name}: the reference did not finish in {MAX_STEPS} steps")


# The Scheduler's refusals of a plan (its _check_plan, in English): each message as a template, read back into
# its fields so that it prints in the reader's language. A message that matches none is printed as it is.
# (The fields here are blanks: only each message's template is used.)
_SCHEDULER_REFUSALS: tuple[Message, ...] = (
    tr("the scheduling policy {policy} returned {kind}; it must return a dict {{sequence: tokens}}", policy="",
       kind=""),
    tr("the scheduling policy {policy} planned {tokens} tokens for {seq}: a token count is a whole number (an int)",
       policy="", tokens="", seq=""),
    tr("the scheduling policy {policy} planned {seq}, which is not in state.running after the step", policy="",
       seq=""),
    tr("the scheduling policy {policy} planned {tokens} tokens for {seq}, but memory granted it nothing: admit or "
       "grow exactly what you schedule", policy="", tokens="", seq=""),
    tr("the scheduling policy {policy} planned {tokens} tokens for {seq}, but memory granted it {granted} tokens: "
       "admit or grow exactly what you schedule", policy="", tokens="", seq="", granted=""),
    tr("the scheduling policy {policy} took memory for {seqs} but did not schedule them", policy="", seqs=""),
    tr("the scheduling policy {policy} planned {tokens} tokens, over the token budget of {budget}", policy="",
       tokens="", budget=""),
    tr("the scheduling policy {policy} runs {seats} seats, over max_num_seqs={limit}", policy="", seats="", limit=""),
    tr("the scheduling policy {policy} admitted a sequence but left it in state.waiting", policy=""),
)


def _template_regex(template: str) -> re.Pattern[str]:
    """A regex that matches what ``template`` formats to, a named group per field."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field:
            parts.append(f"(?P<{field}>.+?)")
    return re.compile("".join(parts), re.S)


def _scheduler_says(message: str) -> Message | str:
    """The Scheduler's refusal ``message`` as one of :data:`_SCHEDULER_REFUSALS` with its fields, or as it is."""
    for refusal in _SCHEDULER_REFUSALS:
        found = _template_regex(refusal.template).fullmatch(message)
        if found:
            said = Message(refusal.template, **found.groupdict())
            if said == message:
                return said
    return message


# The same refusals by a phrase of each message, and the rule each breaks.
_PLAN_HINTS: tuple[tuple[str, Message], ...] = (
    ("but memory granted it",  # en: not shown to readers (a phrase of the Scheduler's message)
     tr("grow or admit exactly the tokens you schedule, and schedule nothing memory refused (a None from grow or "
        "admit granted nothing)")),
    ("but did not schedule them",  # en: not shown to readers (a phrase of the Scheduler's message)
     tr("schedule every sequence you grew or admitted, with the tokens memory granted")),
    ("over the token budget",  # en: not shown to readers (a phrase of the Scheduler's message)
     tr("decodes and prompt chunks share state.token_budget: a sequence computes at most the budget left, so a long "
        "prompt is prefilled in chunks over several steps")),
    ("over max_num_seqs",  # en: not shown to readers (a phrase of the Scheduler's message)
     tr("count seats with seq.num_seqs: a request with n samples takes n seats until they are forked (then each "
        "sample takes one)")),
    ("left it in state.waiting",  # en: not shown to readers (a phrase of the Scheduler's message)
     tr("popleft an admitted sequence from state.waiting as you append it to state.running")),
)


def _plan_hint(message: str, policy: _Audited | None, scheduler: Scheduler) -> Message | str:
    """The rule behind a refusal of the Scheduler's ``_check_plan`` (its English message names what it saw)."""
    planned_elsewhere = "not in state.running" in message  # en: not shown to readers (the Scheduler's phrase)
    if planned_elsewhere and policy is not None and isinstance(policy.plan, dict):
        seq = next(s for s in policy.plan if not any(s is r for r in scheduler.running))
        if not isinstance(seq, Request):
            return tr("key the plan by the sequence records themselves (from state.running or state.waiting), not "
                      "their ids")
        if seq.status is Status.PREEMPTED:
            return tr("{seq} was preempted after it was planned: a victim is the newest running sequence, which the "
                      "oldest-first loop has not reached yet, and a preempted sequence is not scheduled",
                      seq=seq.seq_id)
        return tr("append an admitted sequence to state.running (and popleft it from state.waiting)")
    return next((hint for phrase, hint in _PLAN_HINTS if phrase in message), "")


def _diagnose(got: StepView, want: StepView) -> Message | str:
    """What went wrong in a step, in the words of the rule it broke: a hint only when the log shows that cause."""
    if got.failed:
        return tr("with nothing running, a step that schedules nothing makes the Scheduler fail the head of the queue "
                  "({failed}) as one that can never fit; every request here fits alone: admit it",
                  failed=list(got.failed))
    released = next((k for k, c in enumerate(got.calls) if c.what == "release"), None)
    if released is not None and any(c.what == "admit" and c.granted for c in got.calls[released:]):
        return tr("a step that preempted admits nobody: memory is short, and the preempted go first next step")
    first_admit = next((k for k, c in enumerate(got.calls) if c.what == "admit" and c.granted), None)
    grown_at: dict[str, int] = {}     # where each sequence was first grown, in call order
    for k, c in enumerate(got.calls):
        if c.what == "grow" and c.granted:
            grown_at.setdefault(c.seq_id, k)
    if first_admit is not None and any(grown_at.get(i, first_admit + 1) > first_admit
                                       for i in want.scheduled if i not in want.admitted):
        return tr("grow the running sequences first, then admit: a sequence just admitted must not crowd out the "
                  "running")
    if list(grown_at) != [i for i in got.running_before if i in grown_at]:
        return tr("grow the running oldest first, in state.running's order: the plan's order is the batch's")
    kept = [i for i in want.preempted if i not in got.preempted and i in got.tables and i not in got.scheduled]
    if kept:
        return tr("{seq} could not grow and was the newest: it preempts itself (state.preempt), goes to the front of "
                  "the queue and is not scheduled", seq=kept[0])
    if got.preempted != want.preempted:
        if not want.preempted:
            return tr("preempt only when memory refuses a grow (grow returned None)")
        return tr("preempt the newest running sequence (state.running[-1], the last admitted); expected {expected} "
                  "preempted in that order, got {got}", expected=list(want.preempted), got=list(got.preempted))
    extra = [i for i in got.admitted if i not in want.admitted]
    if extra and want.waiting and want.waiting[0] not in got.admitted:
        return tr("the head of the queue, {head}, cannot be admitted, so it blocks the ones behind it (first come "
                  "first served: nobody starves); you admitted {extra}", head=want.waiting[0], extra=extra)
    return ""


def _differences(got: StepView, want: StepView) -> list[str]:
    return [tr("{name}: got {got}, expected {expected}", name=FIELD_NAMES[name], got=short(_compared(got, name), 200),
               expected=short(_compared(want, name), 200))
            for name in COMPARED if _compared(got, name) != _compared(want, name)]


def _run_schedule(fn: Reader, case: SchedCase) -> list[str]:
    run = _Run(case, fn)
    want = _reference_run(case)
    for expected in want:
        where = tr("step {step} (before it: {before})", step=expected.step, before=expected.before)
        try:
            got = run.step(expected.step)
        except _Refused as refused:
            return [where, refused.message] + ([refused.hint] if refused.hint else [])
        wrong = _differences(got, expected)
        if wrong:
            hint = _diagnose(got, expected)
            return [where, *wrong] + ([hint] if hint else [])
    if not run.done:
        left = [s.seq_id for s in (*run.scheduler.running, *run.scheduler.waiting)]
        return [tr("after step {step} the reference is done; still running or waiting: {left}", step=want[-1].step,
                   left=left)]
    return []


SCHEDULE_NAME = "schedule（排程器的一步）"
Policy = Callable[[SchedulerState], Any]


def _policy_in(path: str | Path) -> tuple[Policy | None, str]:
    """The ``schedule`` a reader's file defines, or None and why not, in words the grader prints."""
    return function_in(path, "schedule", "(state)", (reference.schedule,), tr("policy"))


def check_schedule(policy: Policy | str | Path) -> bool:
    """Grade ``policy(state) -> {seq: tokens}`` as the package Scheduler's policy, step by step against the shipped one.

    ``policy`` is the function, or the path of the file that defines it (``my_engine/scheduler.py``):
    a file that passes is marked passed as it is now, and the engine runs it from then on, for as
    long as the file stays unchanged (:func:`~pagedkv_edu.exercises.my_engine.load_parts`).

    The contract, the package's (:mod:`pagedkv_edu.core.scheduler`): ``state.running`` is the
    batch, oldest admission first; ``state.waiting`` a deque, front first. ``state.memory.grow(seq,
    n)`` makes room for ``n`` tokens after ``seq.num_computed_tokens``, ``state.memory.lookup(seq)``
    finds a cached prefix, ``state.memory.admit(seq, n, hit)`` gives a waiting sequence its blocks;
    each returns the new block ids, or None having changed nothing. ``state.preempt(victim)``
    frees a running sequence's memory (its count becomes 0: it is recomputed) or swaps it out (its
    count is kept), and puts it at the front of ``state.waiting``. The policy moves an admitted
    sequence from ``state.waiting`` to the end of ``state.running`` itself and returns ``{seq:
    tokens}`` in the order scheduled: what memory granted each, within ``state.token_budget`` and
    ``state.max_num_seqs`` seats (``seq.num_seqs`` each). The Scheduler, not the policy nor the
    memory, advances ``num_computed_tokens`` by the planned tokens after the policy returns. When the
    sequence that must grow is itself the newest, it preempts itself: it goes to the front of the
    queue and is not scheduled; if nothing else runs and nothing is scheduled, the Scheduler fails
    it as one that can never fit.

    Each trace's requests arrive at their steps; between steps the grader plays the engine
    through the Scheduler: every sequence whose tokens are all computed samples one, a request of
    ``n`` samples forks after its prompt (``Scheduler.fork``), and a sample finishes after
    ``max_tokens`` (``Scheduler.finish``). Each step is compared with the shipped policy's: the
    tokens scheduled and their order, who is preempted (in order), admitted or failed, every block
    table and the queue. A function that raises, or whose plan the Scheduler refuses, is reported
    with the step and what it saw; so is one that changes a count itself, frees blocks with
    ``state.memory.release`` instead of preempting, or plans a token count that is not an int.
    """
    return grade_part(SCHEDULE_NAME, policy, SCHEDULE_CASES, HIDDEN_SCHEDULE_CASES, _run_schedule, _policy_in)


def try_schedule(policy: Policy | str | Path, case: str | int = 0) -> list[dict[str, Any]]:
    """Run ``policy`` (a function, or the file that defines it) on one shown case (by name or index): every step's
    input, your decisions and the expected ones.

    Each row has ``step``, ``before`` (what the step saw), ``yours`` and ``expected`` (each a
    :class:`StepView`, with the memory calls in order; ``yours`` is None when the step was
    refused) and ``problem`` (why it was refused, or ""). Stops after the first step that differs.
    Nothing is graded or printed; a file that defines no policy raises ``ValueError`` saying why.
    """
    chosen = SCHEDULE_CASES[case] if isinstance(case, int) else next(
        (c for c in SCHEDULE_CASES if c.name == case), None)
    if chosen is None:
        raise KeyError(f"no shown case {case!r}; the cases are {[c.name for c in SCHEDULE_CASES]}")
    if isinstance(policy, (str, Path)):
        fn, problem = _policy_in(policy)
        if fn is None:
            raise ValueError(problem)
        policy = fn
    return rows_to_first_difference(_Run(chosen, Reader(policy)).step, _reference_run(chosen), _differences,
                                    _Refused, _refusal)


def _refusal(refused: _Refused) -> Message | str:
    """A refusal's message and hint as one line: ``try_schedule``'s ``problem``."""
    if not refused.hint:
        return refused.message
    return tr("{message} {hint}", message=refused.message, hint=refused.hint)
