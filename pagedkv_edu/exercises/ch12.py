"""Grader for chapter 12: the engine's step, the piece that composes every other part; and the capstone's run.

``check_step`` grades a reader's ``step(engine)`` (saved by the chapter's ``%%writefile`` cell as
``my_engine/step.py``) the way chapter 6 grades the scheduler: the same requests go through an
:class:`~pagedkv_edu.engine.engine.LLMEngine` that runs the reader's step and one that runs the
shipped :func:`~pagedkv_edu.engine.step.step`, and every step is compared: the outputs it returned,
every record's tokens and status, what the scheduler decided, every block table, and what the step
recorded. Most traces run on a stand-in model (fast enough for seeded hidden cases with block sizes
that are not powers of two); the last shown ones run the tiny random Llama, whose logits are really
sampled. A file that passes is marked passed, and :func:`~pagedkv_edu.exercises.my_engine.load_parts`
gives the engine that step from then on.

The outputs are compared in the order the step returned them (the order their requests ended), so a
step that returns the right outputs in another order fails, with a message that says so.

:func:`watch_step` runs one step of any engine and logs every call it makes into the parts (the chapter
reads a step that way). The capstone's helpers (:func:`capstone_workload`, :func:`capstone_parts`,
:func:`serve`, :func:`transformers_greedy`) are here too, so that the chapter and ``tests/test_capstone.py``
run the same workload the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
import traceback
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.block_manager import BlockManager, ManagerBase
from ..core.block_pool import BlockPool
from ..core.block_table import blocks_needed
from ..core.request import Request, SamplingParams, Status
from ..core.scheduler import ScheduledStep
from ..engine.engine import LLMEngine
from ..engine.outputs import RequestOutput
from ..engine.step import FAILED
from ..engine.step import step as shipped_step
from ..viz.snapshot import Snapshot
from ..viz.trace import EngineTrace
from . import messages
from .ch2 import HIDDEN_BLOCK_SIZES
from .grading import NotSolved, Raised, Reader, describe_exception, rows_to_first_difference, short
from .messages import Message, tr
from .my_engine import MY_ENGINE, Parts, ReportCard, function_in, grade_part

STEP_FILE = MY_ENGINE / "step.py"
"""Where the chapter's ``%%writefile`` cell saves the reader's step, relative to the notebooks."""

StepFn = Callable[[LLMEngine], Any]


# --- the traces ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Req:
    """One request of a trace: its prompt, what it asks for, and the step before which it arrives."""

    prompt: tuple[int, ...]
    max_tokens: int
    n: int = 1
    arrival: int = 0
    temperature: float = 0.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def params(self) -> SamplingParams:
        return SamplingParams(max_tokens=self.max_tokens, n=self.n, temperature=self.temperature, seed=self.seed,
                              stop_token_ids=self.stop_token_ids)


@dataclass(frozen=True)
class StepCase:
    """A trace: requests (ids in arrival order) on a pool of ``num_blocks`` blocks and the engine's limits.

    ``held_outside`` blocks of the pool are held by requests outside the engine (a request that fits
    the pool but not what is left of it can never be held); ``model`` runs the tiny random Llama
    instead of the stand-in.
    """

    name: Message
    requests: tuple[Req, ...]
    block_size: int
    num_blocks: int
    max_seq_len: int = 96
    token_budget: int | None = None
    max_num_seqs: int | None = None
    prefix_caching: bool = False
    held_outside: int = 0
    stop_token_ids: tuple[int, ...] = ()
    model: bool = False
    keep_logprobs: bool = False


class CountingRunner:
    """A stand-in model: a row's next token is ``1000 + 100·request + 10·sample + (tokens so far) mod 10``.

    The tokens change from step to step, so a stop token can end a request part way, and a request's
    samples differ once forked; a row the step does not sample from (a chunk of a prompt) gets one too,
    which only a step that samples it would use.
    """

    vocab_size = 0   # no vocabulary to check prompts against

    def execute(self, step: ScheduledStep, input_ids: Sequence[int]) -> list[int]:
        return [token_at(s.seq.request_id, s.seq.index, s.seq.num_tokens) for s in step.scheduled]

    def release(self, seq_id: Hashable) -> None:
        pass


def token_at(request_id: int, index: int, num_tokens: int) -> int:
    """The stand-in's token for sample ``index`` of ``request_id`` when it holds ``num_tokens`` tokens."""
    return 1000 + 100 * request_id + 10 * index + num_tokens % 10


def _stop_after(request_id: int, prompt_len: int, k: int) -> tuple[int, ...]:
    """The stop token that ends the first sample of ``request_id`` at its ``k``-th output token."""
    return (token_at(request_id, 0, prompt_len + k - 1),)


def _ids(length: int, salt: int, shared: int = 0) -> tuple[int, ...]:
    """A prompt of ``length`` ids: the first ``shared`` common to every prompt, the rest its own (seeded by ``salt``)."""
    rng = random.Random(salt)
    return tuple(range(10, 10 + min(shared, length))) + tuple(rng.randrange(100, 900) for _ in range(length - shared))


def _tiny_ids(length: int, salt: int, shared: int = 0) -> tuple[int, ...]:
    return tuple(t * 7 for t in _ids(length, salt, shared))


STEP_CASES: tuple[StepCase, ...] = (
    StepCase(tr("three prompts of 7, 8 and 9 tokens in 8 blocks of 4: the newest is preempted, then recomputed"), (
        Req(_ids(7, 1), 6), Req(_ids(8, 2), 6), Req(_ids(9, 3), 6)), 4, 8),
    StepCase(tr("a token budget of 10: a 25-token prompt is prefilled in chunks beside two decodes"), (
        Req(_ids(6, 4), 8), Req(_ids(5, 5), 8), Req(_ids(25, 6), 3, arrival=1)), 4, 32, token_budget=10),
    StepCase(tr("a request with n = 3 samples forks after its prompt; one with n = 2 beside it"), (
        Req(_ids(6, 7), 5, n=3), Req(_ids(9, 8), 4, n=2, arrival=1), Req(_ids(5, 9), 3)), 4, 32),
    StepCase(tr("requests that ask for no tokens (max_tokens=0), one before the first step and one later"), (
        Req(_ids(5, 10), 3), Req(_ids(7, 11), 0), Req(_ids(6, 12), 0, arrival=2), Req(_ids(4, 13), 2, arrival=2)),
        4, 16),
    StepCase(tr("stop tokens: r0 stops at its 2nd token (its own stop token), r1 at the engine's; "
                "r2 runs to max_tokens"), (
        Req(_ids(5, 14), 8, stop_token_ids=_stop_after(0, 5, 2)), Req(_ids(6, 15), 8), Req(_ids(7, 16), 4)), 4, 32,
        stop_token_ids=(token_at(1, 0, 6 + 3 - 1),)),
    StepCase(tr("a request that can never be held: 2 of 8 blocks are held outside the engine, and it needs 7"), (
        Req(_ids(20, 17), 8), Req(_ids(3, 18), 2, arrival=1)), 4, 8, held_outside=2),
    StepCase(tr("prefix caching: four prompts share 10 tokens, the last arrives after the first finished"), (
        Req(_ids(14, 19, 10), 3), Req(_ids(13, 20, 10), 5), Req(_ids(16, 21, 10), 4, n=2),
        Req(_ids(12, 22, 10), 2, arrival=6)), 4, 14, prefix_caching=True),
    StepCase(tr("the tiny random Llama: greedy and sampled requests, n = 2, a preemption, log-probs kept"), (
        Req(_tiny_ids(9, 23), 6), Req(_tiny_ids(7, 24), 5, n=2, temperature=0.9, seed=5),
        Req(_tiny_ids(5, 25), 0), Req(_tiny_ids(8, 26), 4, temperature=0.7, seed=11, arrival=1)), 4, 10,
        model=True, keep_logprobs=True),
    StepCase(tr("the tiny random Llama with prefix caching and a token budget of 8: chunks, hits, n = 3"), (
        Req(_tiny_ids(13, 27, 8), 4), Req(_tiny_ids(11, 28, 8), 5, n=3, temperature=1.0, seed=3),
        Req(_tiny_ids(10, 29, 8), 3, arrival=2)), 4, 24, token_budget=8, prefix_caching=True, model=True),
)


def _hidden_step_cases(count: int = 40, seed: int = 12) -> list[StepCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        b = rng.choice(HIDDEN_BLOCK_SIZES)
        caching = rng.random() < 0.4
        shared = rng.randint(b, 3 * b) if caching else 0
        drawn = []     # (arrival, prompt, max_tokens, n, the output token a stop token ends it at, or 0)
        for j in range(rng.randint(3, 8)):
            prompt = _ids(rng.randint(1, 5 * b) + shared, 1000 * seed + 10 * i + j, shared)
            max_tokens = rng.choice([0, 1, rng.randint(1, 3 * b + 2), rng.randint(1, 3 * b + 2)])
            stop_at = rng.randint(1, max_tokens) if max_tokens and rng.random() < 0.25 else 0
            drawn.append((rng.choice([0, 0, 0, 1, 2, 5]), prompt, max_tokens, rng.choice([1, 1, 1, 2, 3]), stop_at))
        drawn.sort(key=lambda d: d[0])     # request ids in arrival order, as the engine gives them
        reqs = tuple(Req(prompt, max_tokens, n, arrival, stop_token_ids=_stop_after(j, len(prompt), stop_at)
                         if stop_at else ()) for j, (arrival, prompt, max_tokens, n, stop_at) in enumerate(drawn))
        need = max(r.n * blocks_needed(len(r.prompt) + max(r.max_tokens - 1, 0), b) for r in reqs)
        held = rng.randint(1, max(1, need // 3)) if rng.random() < 0.2 else 0   # then one may never be held
        cases.append(StepCase(tr("hidden case {n}", n=i + 1), reqs, b, need + rng.randint(0, need // 4),
                              max_seq_len=8 * b + shared + 8,
                              token_budget=rng.choice([None, rng.randint(1, 3 * b), rng.randint(b, 8 * b)]),
                              max_num_seqs=max(r.n for r in reqs) + rng.choice([0, 1, 2, 64]),
                              prefix_caching=caching, held_outside=held))
    return cases


HIDDEN_STEP_CASES = _hidden_step_cases()
MAX_STEPS = 400


# --- one step, seen from outside -------------------------------------------------------------------
STATUSES: dict[str, Message] = {"waiting": tr("waiting"), "running": tr("running"), "preempted": tr("preempted"),
                                 "swapped": tr("swapped"), "finished": tr("finished")}
"""A record's status (``Status.value``) as a diff line names it."""


@dataclass(frozen=True)
class RecordView:
    """One sequence's record after a step: what the step must keep up to date."""

    request_id: int
    status: str
    tokens: tuple[int, ...]
    finish_reason: str | None
    logprobs: bool               # it holds the log-probs it last sampled from (keep_logprobs)

    def shown(self) -> Message:
        """The record as a diff line shows it, in the reader's language."""
        state = (STATUSES.get(self.status, self.status) if self.finish_reason is None
                 else tr("finished ({reason})", reason=self.finish_reason))
        tokens = short(list(self.tokens), 70)
        if self.logprobs:
            return tr("{state}, tokens {tokens}, log-probs kept", state=state, tokens=tokens)
        return tr("{state}, tokens {tokens}", state=state, tokens=tokens)

    def __str__(self) -> str:
        return str(self.shown())


@dataclass(frozen=True)
class StepView:
    """One step of a trace, before and after: what the grader compares and ``try_step`` returns."""

    step: int
    before: Message                                         # the queues and free blocks the step saw
    returned: tuple[tuple[int, tuple[tuple[int, tuple[int, ...], str], ...]], ...] | Message   # in the order returned
    records: dict[str, RecordView]                          # every sequence seen so far, by label
    decisions: int                                          # times the scheduler decided in this step
    scheduled: tuple[tuple[str, int, bool], ...]            # (sequence, tokens, samples), in the batch's order
    preempted: tuple[str, ...]
    admitted: tuple[str, ...]
    failed: tuple[str, ...]
    tables: dict[str, tuple[int, ...]]                      # every block table after the step
    recorded: int                                           # history entries and trace frames after the step
    frame: Snapshot | None = field(default=None, repr=False)   # the trace's frame of this step


COMPARED = ("returned", "records", "decisions", "scheduled", "preempted", "admitted", "failed", "tables", "recorded",
            "frame")


def label(seq_id: Hashable) -> str:
    """``r3`` for a request's first sample (seq id 3), ``r3.1`` for the next (seq id ``"r3.1"``)."""
    return f"r{seq_id}" if isinstance(seq_id, int) else str(seq_id)


def _returned(outputs: Any) -> tuple | Message:
    """The outputs a step returned, in its order (the order its requests ended: a caller streams them so);
    or, when they are not a list of outputs, what they are."""
    if not isinstance(outputs, (list, tuple)):
        return tr("{kind} {value} (a step returns a list of RequestOutput)", kind=type(outputs).__name__,
                  value=short(outputs))
    bad = [o for o in outputs if not isinstance(o, RequestOutput)]
    if bad:
        return tr("a list holding {value} (a step returns the RequestOutputs engine.finish_sequence gives)",
                  value=short(bad[0]))
    return tuple((o.request_id, tuple((c.index, tuple(c.token_ids), c.finish_reason) for c in o.completions))
                 for o in outputs)


def _joined(items: Sequence[Any], *, semicolons: bool = False) -> Any:
    """``items`` as one list, joined by ", " (or "; ") in English, "" when there are none: each item is joined to
    the ones before it by a message, so that the list renders in the reader's language when printed, not when made
    (the answer key is cached, and its lines may be printed in either language)."""
    if not items:
        return ""
    out = items[0]
    for item in items[1:]:
        out = (tr("{items}; {item}", items=out, item=item) if semicolons
               else tr("{items}, {item}", items=out, item=item))
    return out


def _show_returned(value: tuple | Message) -> Any:
    """What a step returned, non-empty: its outputs in order, or (a message) what it returned instead."""
    if isinstance(value, str):
        return value
    return _joined([tr("r{request}: {samples}", request=rid, samples=_joined(
        [tr("sample {i} {tokens} ({reason})", i=i, tokens=short(list(t), 50), reason=why) for i, t, why in samples]))
        for rid, samples in value], semicolons=True)


class _Run:
    """One trace through an engine running ``step_fn``: the shipped step, or the reader's."""

    def __init__(self, case: StepCase, step_fn: StepFn) -> None:
        self.case = case
        memory = None
        if case.held_outside:
            free = case.num_blocks - case.held_outside
            memory = BlockManager.over(BlockPool.from_free_order(case.num_blocks, case.block_size, range(free)),
                                       case.max_seq_len)
        model = _tiny().model if case.model else CountingRunner()
        self.engine = LLMEngine(model, None, memory=memory, step=step_fn, trace=EngineTrace(),
                                kv_budget_tokens=case.num_blocks * case.block_size, block_size=case.block_size,
                                max_seq_len=case.max_seq_len, max_num_batched_tokens=case.token_budget,
                                max_num_seqs=case.max_num_seqs, enable_prefix_caching=case.prefix_caching,
                                stop_token_ids=case.stop_token_ids, keep_logprobs=case.keep_logprobs)
        self.decided: list[ScheduledStep] = []
        decide = self.engine.scheduler.schedule

        def logged() -> ScheduledStep:      # every decision the scheduler makes, whoever asks for it
            decision = decide()
            self.decided.append(decision)
            return decision

        self.engine.scheduler.schedule = logged   # type: ignore[method-assign]
        self.seen: dict[str, Request] = {}
        self.last_arrival = max(r.arrival for r in case.requests)

    def step(self, index: int) -> StepView:
        """Run step ``index`` (its arrivals first); raises :class:`Raised` when the step raised."""
        engine = self.engine
        for req in self.case.requests:
            if req.arrival == index:
                engine.add_request(list(req.prompt), req.params())
        self._look()
        before = self.describe()
        self.decided.clear()
        returned = engine.step()
        self._look()
        decision = self.decided[-1] if self.decided else ScheduledStep()
        memory = engine.memory
        trace = engine.trace
        return StepView(
            index, before, _returned(returned),
            {name: RecordView(seq.request_id, seq.status.value, tuple(seq.output_token_ids), seq.finish_reason,
                              seq.last_logprobs is not None) for name, seq in self.seen.items()},
            len(self.decided),
            tuple((label(s.seq.seq_id), s.num_new_tokens, s.samples) for s in decision.scheduled),
            tuple(label(s.seq_id) for s in decision.preempted), tuple(label(s.seq_id) for s in decision.admitted),
            tuple(label(s.seq_id) for s in decision.failed),
            {label(seq.seq_id): tuple(memory.block_ids(seq)) for seq in memory.sequences},
            len(engine.history) + len(trace), trace[-1] if len(trace) else None)

    def _look(self) -> None:
        """Every record the engine holds now, kept once seen (a finished request's records leave the engine)."""
        engine = self.engine
        seqs = [*engine.requests.values(), *(s for g in engine.groups.values() for s in g.samples),
                *engine.scheduler.running, *engine.scheduler.waiting]
        for seq in seqs:
            self.seen.setdefault(label(seq.seq_id), seq)

    def describe(self) -> Message:
        """The queues and the free blocks, as a message: the answer key keeps it, and prints it in either language."""
        scheduler = self.engine.scheduler
        run = [f"{label(s.seq_id)} {s.num_computed_tokens}/{s.num_tokens}" for s in scheduler.running]
        wait = [_waiting(s) for s in scheduler.waiting]
        return tr("running (computed/tokens) [{running}]; waiting [{waiting}]; {free} free blocks of {size}",
                  running=_joined(run) if run else tr("none"), waiting=_joined(wait) if wait else tr("none"),
                  free=self.engine.memory.pool.num_free, size=self.case.block_size)

    @property
    def done(self) -> bool:
        return not self.engine.has_unfinished


def _waiting(seq: Request) -> Message:
    """A waiting sequence as the queues before a step show it: ``r3 (7 tokens, n=2, preempted)``."""
    name, tokens, preempted = label(seq.seq_id), seq.num_tokens, seq.status is Status.PREEMPTED
    if seq.num_seqs > 1:
        if preempted:
            return tr("{seq} ({tokens} tokens, n={n}, preempted)", seq=name, tokens=tokens, n=seq.num_seqs)
        return tr("{seq} ({tokens} tokens, n={n})", seq=name, tokens=tokens, n=seq.num_seqs)
    if preempted:
        return tr("{seq} ({tokens} tokens, preempted)", seq=name, tokens=tokens)
    return tr("{seq} ({tokens} tokens)", seq=name, tokens=tokens)


@functools.cache
def _tiny() -> Any:
    """The tiny random Llama, loaded once per process (its logits are what the last shown traces sample)."""
    from ..model.loading import load_model

    return load_model("tiny-random")


@functools.cache
def _reference_run(case: StepCase) -> tuple[StepView, ...]:
    """The shipped step on the trace: the answer key (computed once per case).

    It is made in English whatever the reader's language: a message's English text is fixed when it is made,
    with its inner messages rendered in the language of that moment, and the key is printed in either language
    for as long as the process lives (a message renders its other languages afresh from its fields).
    """
    spoken = messages.language()
    messages.set_language("en")
    try:
        run = _Run(case, shipped_step)
        views: list[StepView] = []
        for index in range(MAX_STEPS):
            if run.done and index > run.last_arrival:
                return tuple(views)
            views.append(run.step(index))
    finally:
        messages.set_language(spoken)
    raise AssertionError(f"{case.name}: the shipped step did not finish in {MAX_STEPS} steps")


# --- what differs, and why -------------------------------------------------------------------------
def _differences(got: StepView, want: StepView) -> list[Message]:
    lines = []
    if got.returned != want.returned:
        if not isinstance(got.returned, str) and sorted(got.returned) == sorted(want.returned):
            lines.append(tr("returned the same outputs in another order: yours {yours}, the shipped step's {theirs} "
                            "(a step returns its outputs in the order their requests ended: those that asked for no "
                            "tokens, then those the scheduler failed, then the batch's)",
                            yours=_show_order(got.returned), theirs=_show_order(want.returned)))
        elif got.returned == ():
            lines.append(tr("returned: yours nothing; the shipped step's {theirs}",
                            theirs=_show_returned(want.returned)))
        elif want.returned == ():
            lines.append(tr("returned: yours {yours}; the shipped step's nothing", yours=_show_returned(got.returned)))
        else:
            lines.append(tr("returned: yours {yours}; the shipped step's {theirs}", yours=_show_returned(got.returned),
                            theirs=_show_returned(want.returned)))
    for name in sorted(set(got.records) | set(want.records), key=_order):
        mine, theirs = got.records.get(name), want.records.get(name)
        if mine is None and theirs is not None:
            lines.append(tr("record {name}: yours does not exist; the shipped step's {theirs}", name=name,
                            theirs=theirs.shown()))
        elif theirs is None and mine is not None:
            lines.append(tr("record {name}: yours {yours}; the shipped step's does not exist", name=name,
                            yours=mine.shown()))
        elif mine != theirs:
            lines.append(tr("record {name}: yours {yours}; the shipped step's {theirs}", name=name,
                            yours=mine.shown(), theirs=theirs.shown()))
    if got.decisions != want.decisions:
        lines.append(tr("the scheduler decided {yours} times in your step, {theirs} in the shipped one's "
                        "(engine.forward_step decides once and runs the model on that decision)",
                        yours=got.decisions, theirs=want.decisions))
    for name in ("scheduled", "preempted", "admitted", "failed"):
        if getattr(got, name) != getattr(want, name):
            lines.append(_decided_differently(name, short(list(getattr(got, name)), 160),
                                              short(list(getattr(want, name)), 160)))
    if got.tables != want.tables:
        changed = {k: (got.tables.get(k), want.tables.get(k)) for k in set(got.tables) | set(want.tables)
                   if got.tables.get(k) != want.tables.get(k)}
        lines.append(tr("block tables: {tables}", tables=_joined([
            _tables_differ(k, a, b) for k, (a, b) in sorted(changed.items(), key=lambda kv: _order(kv[0]))],
            semicolons=True)))
    if got.recorded != want.recorded:
        lines.append(tr("recorded: after your step the engine's history and trace hold {yours} entries, after the "
                        "shipped step's {theirs}", yours=got.recorded, theirs=want.recorded))
    elif got.frame != want.frame:
        fields = [f.name for f in dataclasses.fields(Snapshot) if getattr(got.frame, f.name, None)
                  != getattr(want.frame, f.name, None)]
        lines.append(tr("the step's trace frame (what engine.record saw) differs in {fields}: record the step once "
                        "its tokens are in and what stopped has finished", fields=_joined(fields)))
    return lines[:6]


def _tables_differ(seq: str, yours: tuple[int, ...] | None, theirs: tuple[int, ...] | None) -> Message:
    """One sequence's block table after your step and after the shipped one, either of them absent."""
    if yours is None:
        return tr("{seq} yours none, the shipped step's {theirs}", seq=seq, theirs=list(theirs or ()))
    if theirs is None:
        return tr("{seq} yours {yours}, the shipped step's none", seq=seq, yours=list(yours))
    return tr("{seq} yours {yours}, the shipped step's {theirs}", seq=seq, yours=list(yours), theirs=list(theirs))


def _decided_differently(name: str, yours: str, theirs: str) -> Message:
    """One list of the scheduler's decision (``scheduled``, ``preempted``, ``admitted`` or ``failed``) that differs."""
    if name == "scheduled":
        return tr("scheduled: yours {yours}; the shipped step's {theirs}", yours=yours, theirs=theirs)
    if name == "preempted":
        return tr("preempted: yours {yours}; the shipped step's {theirs}", yours=yours, theirs=theirs)
    if name == "admitted":
        return tr("admitted: yours {yours}; the shipped step's {theirs}", yours=yours, theirs=theirs)
    return tr("failed: yours {yours}; the shipped step's {theirs}", yours=yours, theirs=theirs)


def _show_order(value: tuple) -> Any:
    return _joined([f"r{rid}" for rid, _ in value])


def _order(name: str) -> tuple[int, str]:
    head, _, tail = name[1:].partition(".")
    return (int(head) if head.isdigit() else 10**9, tail)


HINTS: dict[str, Message] = {
    "no_tokens": tr("a request that asked for no tokens (max_tokens=0) holds no memory, so the scheduler never sees "
                    "it: its output comes from engine.take_ready(), which the step returns with the others"),
    "failed": tr("a request in scheduled.failed can never be held: end it with engine.finish_sequence(request, "
                 "FAILED, release=False) (it holds no memory) and return what that gives"),
    "chunk": tr("a sequence whose step computed only a chunk of its prompt has no next token yet: sample only for the "
                "scheduled entries with s.samples true"),
    "siblings": tr("a request with n > 1 forks its other samples after its prompt: sample for every sequence "
                   "engine.samplers(s.seq) returns (the sequence itself, and its siblings the first time), each from "
                   "s's row of the output"),
    "decided": tr("call engine.forward_step() once per step: it asks the scheduler for one decision and runs the model "
                  "on it; a second call decides (and runs) another step inside this one"),
    "append": tr("give every sequence that samples its token with engine.append_token(request, token, logprobs): the "
                 "record's tokens are what the next step computes and what its output returns"),
    "preempted": tr("a sequence the scheduler preempted in this step (scheduled.preempted) has no row in the model's "
                    "output: it samples nothing until it is readmitted and recomputed"),
    "stop": tr("after each token ask stop_reason(request, engine.config.stop_token_ids, engine.tokenizer): a stop "
               "token or max_tokens reached ends the sequence, by engine.finish_sequence(request, reason)"),
    "logprobs": tr("with keep_logprobs on, give engine.append_token the row's log-probs (sample_tokens returns them, "
                   "one row per row of the output), as the third argument"),
    "logprobs_row": tr("index the log-probs by the row of the output a sequence sampled from (the row of its "
                       "(row, sequence) pair), not by the pair's place in the list: siblings share a row"),
    "release": tr("end a sequence that stopped with engine.finish_sequence(request, reason): it gives the sequence's "
                  "blocks back (release=False is for a request that holds none, one the scheduler failed)"),
    "record": tr("end the step with engine.record(scheduled): the engine's history and the trace (the replay) read it"),
    "unfinished": tr("a request's output is ready only once its last sample has stopped: return what "
                     "engine.finish_sequence returns (an empty list until then), not an output of your own"),
}


def _diagnose(got: StepView, want: StepView, case: StepCase) -> Message | str:
    """The known cause of a step's first difference, when the difference is exactly that cause's; else ""."""
    got_ids = set() if isinstance(got.returned, str) else {rid for rid, _ in got.returned}
    want_ids = set() if isinstance(want.returned, str) else {rid for rid, _ in want.returned}
    missing, extra = want_ids - got_ids, got_ids - want_ids
    if got.decisions != want.decisions:
        return HINTS["decided"]
    if missing and any(case.requests[rid].max_tokens == 0 for rid in missing):
        return HINTS["no_tokens"]
    if missing and any(f"r{rid}" in want.failed for rid in missing):
        return HINTS["failed"]
    unfinished = {r.request_id for r in want.records.values() if r.finish_reason is None}
    if extra and extra <= unfinished:
        return HINTS["unfinished"]
    samples_only = {s for s, _, samples in got.scheduled if not samples}
    if any(name in samples_only and len(r.tokens) > len(want.records[name].tokens)
           for name, r in got.records.items() if name in want.records):
        return HINTS["chunk"]
    if any("." in name and name not in got.records for name in want.records):
        return HINTS["siblings"]
    sampled = {s for s, _, samples in want.scheduled if samples}
    if any(name in got.records and len(got.records[name].tokens) < len(r.tokens) and name in sampled
           for name, r in want.records.items()):
        return HINTS["append"]
    if any(name in got.records and len(got.records[name].tokens) > len(want.records[name].tokens)
           for name in want.preempted):
        return HINTS["preempted"]
    if any(name in got.records and r.finish_reason not in (None, FAILED) and got.records[name].finish_reason is None
           and got.records[name].tokens == r.tokens for name, r in want.records.items()):
        return HINTS["stop"]
    if any(got.records.get(name) is not None and got.records[name].finish_reason is not None
           and name not in want.tables for name in got.tables):
        return HINTS["release"]
    if got.recorded < want.recorded:
        return HINTS["record"]
    if any(name in got.records and r.logprobs and not got.records[name].logprobs for name, r in want.records.items()):
        return HINTS["logprobs"]
    return ""


def _raised_hint(error: BaseException, filename: str | None, want: StepView) -> Message | str:
    """The known cause of an exception raised on the reader's own line, when the line and the step show it; else ""."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if filename and f.filename == filename]
    line = (frames[-1].line or "") if frames else ""
    if "finish_sequence" in line and want.failed and isinstance(error, ValueError):
        return HINTS["failed"]                           # release=True on a request that never held memory
    if "logprobs[" in line and isinstance(error, IndexError):
        return HINTS["logprobs_row"]
    return ""


def _your_step_raised(raised: Raised, filename: str | None) -> Message:
    """``your step raised IndexError: ..., at `...` (your line 12: `engine.append_token(...)`)``: the line is the
    reader's own, when their code is in the traceback."""
    frames = [f for f in traceback.extract_tb(raised.error.__traceback__) if filename and f.filename == filename]
    error = raised.args[0] if raised.args else ""
    if not frames:
        return tr("your step {error}", error=error)
    return tr("your step {error} (your line {n}: `{line}`)", error=error, n=frames[-1].lineno,
              line=(frames[-1].line or "").strip())


def _run_step(fn: Reader, case: StepCase) -> list[Message]:
    want = _reference_run(case)
    run = _Run(case, fn)
    for expected in want:
        where = tr("step {step} (before it: {before})", step=expected.step, before=expected.before)
        try:
            got = run.step(expected.step)
        except Raised as raised:
            hint = _raised_hint(raised.error, _filename(fn.fn), expected)
            return [where, _your_step_raised(raised, _filename(fn.fn))] + ([hint] if hint else [])
        except NotSolved:
            raise
        except Exception as error:   # the engine, outside your step, on the state your step left
            return [where, tr("after your step the engine {error}", error=describe_exception(error))]
        wrong = _differences(got, expected)
        if wrong:
            hint = _diagnose(got, expected, case)
            return [where, *wrong] + ([hint] if hint else [])
    if not run.done:
        left = [label(s.seq_id) for s in (*run.engine.scheduler.running, *run.engine.scheduler.waiting)]
        why = HINTS["no_tokens"] if not run.engine.scheduler.has_unfinished else ""
        if left:
            done = tr("after step {step} the shipped engine is done; yours still has unfinished requests {left}",
                      step=want[-1].step, left=left)
        else:
            done = tr("after step {step} the shipped engine is done; yours still has unfinished requests "
                      "(none the scheduler holds)", step=want[-1].step)
        return [done] + ([why] if why else [])
    return []


def _filename(fn: Any) -> str | None:
    code = getattr(fn, "__code__", None)
    return None if code is None else code.co_filename


# --- the grader ------------------------------------------------------------------------------------
STEP_NAME = "step（引擎的一步）"


def _step_in(path: str | Path) -> tuple[StepFn | None, str]:
    """The ``step`` a reader's file defines, or None and why not, in words the grader prints."""
    return function_in(path, "step", "(engine)", (shipped_step,), "step")


def check_step(path: str | Path | StepFn = STEP_FILE) -> bool:
    """Grade ``step(engine) -> list[RequestOutput]`` against the shipped step, step by step on traces.

    ``path`` is the reader's file (``my_engine/step.py``), or the function itself. A file that passes
    is marked passed as it is now, and the engine runs that step for as long as the file stays unchanged
    (:func:`~pagedkv_edu.exercises.my_engine.load_parts`).

    Each trace's requests arrive at their steps and go through two engines with the same settings, one
    running the reader's step and one the shipped step; after every step the grader compares the
    outputs returned (request ids in the order returned, each sample's tokens and finish reason), every record's tokens,
    status and finish reason, how often the scheduler decided and what (who ran with how many tokens,
    who was preempted, admitted or failed), every block table, and the history and trace frame the step
    recorded. The first difference is reported with the step, what the queues were before it, what your
    step gave and what the shipped one gave, and a hint when the difference is that of a known slip.
    """
    return grade_part(STEP_NAME, path, STEP_CASES, HIDDEN_STEP_CASES, _run_step, _step_in)


def try_step(path: str | Path | StepFn = STEP_FILE, case: str | int = 0) -> list[dict[str, Any]]:
    """Run a step (a function, or the file that defines it) on one shown case (by name or index): every step's
    input, what your step left and what the shipped one left.

    Each row has ``step``, ``before`` (what the step saw), ``yours`` and ``expected`` (each a
    :class:`StepView`; ``yours`` is None when your step raised) and ``problem`` (what it raised, or "").
    Stops after the first step that differs. Nothing is graded or printed; a file that defines no step
    raises ``ValueError`` saying why.
    """
    chosen = STEP_CASES[case] if isinstance(case, int) else next((c for c in STEP_CASES if c.name == case), None)
    if chosen is None:
        raise KeyError(f"no shown case {case!r}; the cases are {[c.name for c in STEP_CASES]}")
    fn: StepFn | None = path if not isinstance(path, (str, Path)) else None
    if fn is None:
        fn, problem = _step_in(path)
        if fn is None:
            raise ValueError(problem)
    return rows_to_first_difference(_Run(chosen, Reader(fn)).step, _reference_run(chosen), _differences, Raised,
                                    lambda raised: _your_step_raised(raised, _filename(fn)))


# --- one step, read function by function ------------------------------------------------------------
def _shown(value: Any) -> str:
    """A value as a line of the step's call log names it: a record by its label, a step by its size.

    The call log is notation, read beside the code (``memory.admit(r1, 7, hit of 4 tokens) → [0, 3, 4]``), not a
    grader's sentence: it reads the same in every language, and the zh-TW notebook's check cell finds
    ``hit of 4 tokens`` in it, as the English one does.
    """
    if isinstance(value, Request):
        return label(value.seq_id)
    if isinstance(value, ScheduledStep):
        return (f"ScheduledStep({len(value.scheduled)} sequences, {value.num_tokens} tokens"
                + (f", preempted {[label(s.seq_id) for s in value.preempted]}" if value.preempted else "") + ")")
    if isinstance(value, RequestOutput):
        return f"output of r{value.request_id}"   # en: not shown to readers as prose (call-log notation)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_shown(k)}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if hasattr(value, "num_tokens") and hasattr(value, "block_ids"):   # a prefix hit
        return f"hit of {value.num_tokens} tokens"   # en: not shown to readers as prose (call-log notation)
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"logits {list(shape)}"
    return short(value, 40)


class StepLog:
    """The calls one engine step makes into the engine's parts, nested as they happen (:func:`watch_step`).

    Each method of the engine, its scheduler, policy, memory and runner that a step reaches is wrapped
    for as long as the log is open, and so are ``sample_tokens`` and ``stop_reason`` as the step's own
    module names them: the same log reads the shipped step and a reader's.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._depth = 0
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, shown: str, show_args: Callable[..., str] | None = None,
             show_result: bool = True) -> None:
        """Log every call of ``owner.name`` (an object's method, or a name in a module's globals, a dict) as ``shown``."""
        is_dict = isinstance(owner, dict)
        if (name not in owner) if is_dict else not hasattr(owner, name):
            return
        original = owner[name] if is_dict else getattr(owner, name)

        def logged(*args: Any, **kwargs: Any) -> Any:
            described = show_args(*args, **kwargs) if show_args else ", ".join(
                [_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()])
            self.lines.append("  " * self._depth + f"{shown}({described})")
            at, self._depth = len(self.lines), self._depth + 1
            try:
                result = original(*args, **kwargs)
            finally:
                self._depth -= 1
            if show_result and result is not None:
                if len(self.lines) == at:
                    self.lines[-1] += f" → {_shown(result)}"
                else:
                    self.lines.append("  " * self._depth + f"→ {_shown(result)}")
            return result

        if is_dict:
            owner[name] = logged
            self._undo.append(lambda: owner.__setitem__(name, original))
        else:
            own = name in vars(owner)
            setattr(owner, name, logged)
            self._undo.append(lambda: setattr(owner, name, original) if own else delattr(owner, name))

    def close(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __str__(self) -> str:
        return "\n".join(self.lines)


def watch_step(engine: LLMEngine) -> StepLog:
    """Run one ``engine.step()`` and return the log of every call it made into the engine's parts.

    The step is the engine's own (shipped, or a reader's); what it calls is logged with the records it
    was given and what it returned, nested by who called whom. The engine is left as it would be after an
    unwatched step: the wrappers are removed before this returns.
    """
    log = StepLog()
    scheduler, memory, runner = engine.scheduler, engine.memory, engine.runner
    module = getattr(engine.step_fn, "__globals__", {})
    for name in ("take_ready", "forward_step", "samplers", "fork_sequence", "append_token", "finish_sequence",
                 "record"):
        log.wrap(engine, name, f"engine.{name}", show_result=name not in ("append_token", "record"))
    log.wrap(scheduler, "schedule", "scheduler.schedule")
    log.wrap(scheduler, "policy", "policy", lambda state: "state")
    log.wrap(scheduler, "finish", "scheduler.finish")
    for name in ("lookup", "admit", "grow", "fork", "release"):
        log.wrap(memory, name, f"memory.{name}")
    log.wrap(runner, "execute", "runner.execute",
             lambda step, ids: f"{_shown(step)}, {len(ids)} token ids")   # en: not shown to readers as prose (call log)
    log.wrap(module, "sample_tokens", "sample_tokens", lambda out, rows, keep=False: f"{_shown(out)}, rows "
             + ", ".join(f"{row}→{_shown(seq)}" for row, seq in rows))
    log.wrap(module, "stop_reason", "stop_reason", lambda request, *rest: _shown(request))
    try:
        log.lines.append("engine.step()")
        log._depth = 1
        finished = engine.step()
        log._depth = 0
        log.lines.append(f"→ {_shown(finished)}")
    finally:
        log.close()
    return log


# --- the capstone: the 50 consultants, scaled, on SmolLM2 -------------------------------------------
@dataclass(frozen=True)
class Capstone:
    """The capstone's requests (real text, tokenized), what each asks for, and the engine's settings."""

    prompts: list[list[int]]
    params: list[SamplingParams]
    settings: dict[str, Any]
    sampled: int                 # the request with n = 3 samples, at a temperature with a seed

    @property
    def greedy(self) -> list[int]:
        """The requests decoded greedily: transformers' ``generate`` gives their tokens too."""
        return [i for i, p in enumerate(self.params) if p.temperature == 0]


def capstone_workload(model: Any, *, num_requests: int = 10, length_scale: float = 1 / 16, output_scale: float = 0.5,
                      block_size: int = 4, kv_budget_tokens: int = 160, sampled: int = 1, seed: int = 0) -> Capstone:
    """The first ``num_requests`` of the 50 consultants at ``length_scale``, their outputs also cut by ``output_scale``.

    Every prompt starts with the shared system prompt, so prefix caching finds its blocks; the KV budget
    (``kv_budget_tokens`` slots in blocks of ``block_size``) is too small for all of them at once, so the
    scheduler preempts; request ``sampled`` asks for n = 3 samples at temperature 0.8 with a seed.
    """
    from ..sim.sharing import few_shot_max_seq_len
    from ..workload import consultant_prompts, copilot50

    requests = copilot50(seed, num_requests, output_scale=output_scale, length_scale=length_scale)
    prompts = consultant_prompts(requests, model.tokenizer, seed, length_scale=length_scale)
    params = [SamplingParams(max_tokens=r.output_len) for r in requests]
    params[sampled] = dataclasses.replace(params[sampled], n=3, temperature=0.8, seed=7)
    settings = {"kv_budget_tokens": kv_budget_tokens, "block_size": block_size,
                "max_seq_len": few_shot_max_seq_len(0, length_scale=length_scale), "enable_prefix_caching": True,
                "stop_token_ids": tuple(model.stop_token_ids)}
    return Capstone(prompts, params, settings, sampled)


Decision = tuple[tuple[tuple[str, int, tuple[int, ...]], ...], tuple[str, ...]]
"""One step's decisions, as two engines are compared: (sequence, tokens computed, blocks its table gained) for
each scheduled sequence in the batch's order, then the sequences preempted."""


@dataclass
class Served:
    """One engine's run of a workload: its outputs, every step's decisions, its trace, its wall time, and what
    the scheduler counted (preemptions; prompt tokens found in the prefix cache, at admission and at a
    preempted sequence's readmission)."""

    outputs: list[RequestOutput]
    steps: list[Decision]
    trace: EngineTrace
    seconds: float
    preemptions: int
    prefix_hit_tokens: int       # new prompts' tokens the prefix cache held when they were admitted
    resumed_hit_tokens: int      # a preempted sequence's tokens still cached when it came back
    prompt_tokens: int           # the prompts' tokens at their first admission

    @property
    def tokens(self) -> list[list[list[int]]]:
        """Every request's samples' tokens, in request order."""
        return [[list(c.token_ids) for c in o.completions] for o in self.outputs]

    @property
    def preempted(self) -> list[str]:
        """Every preemption's victim, in the order they happened."""
        return [victim for _, victims in self.steps for victim in victims]


def serve(engine: LLMEngine, work: Capstone, *, first: int | None = None, max_tokens: int | None = None) -> Served:
    """Serve ``work`` (its first ``first`` requests, each cut to ``max_tokens``, when given) and trace every step.

    Every request is added before the first step, so two engines given the same work face the same
    queue; each step's decisions are read off ``engine.last_step``, which is what comparing two engines
    step by step needs, whatever step function each runs.
    """
    engine.trace = engine.trace if engine.trace is not None else EngineTrace()
    params = [p if max_tokens is None else dataclasses.replace(p, max_tokens=min(p.max_tokens, max_tokens))
              for p in work.params]
    ids = [engine.add_request(p, sp) for p, sp in list(zip(work.prompts, params))[:first]]
    outputs: dict[int, RequestOutput] = {}
    steps: list[Decision] = []
    start = time.perf_counter()
    while engine.has_unfinished:
        for out in engine.step():
            outputs[out.request_id] = out
        decided = engine.last_step
        assert decided is not None, "the engine's step ran no schedule (engine.forward_step sets last_step)"
        steps.append((tuple((label(s.seq.seq_id), s.num_new_tokens, tuple(s.new_block_ids)) for s in decided.scheduled),
                      tuple(label(s.seq_id) for s in decided.preempted)))
    seconds = time.perf_counter() - start
    missing = [i for i in ids if i not in outputs]
    if missing:
        raise AssertionError(f"the engine finished without returning the outputs of requests {missing}")
    counts = engine.scheduler.counts
    return Served([outputs[i] for i in ids], steps, engine.trace, seconds, engine.scheduler.num_preemptions,
                  counts.prefix_hit_tokens, counts.resumed_hit_tokens, counts.prompt_tokens)


def first_difference(a: Served, b: Served) -> Message | str:
    """Where two runs of the same work first part: a step's decisions, or a request's tokens; "" when they agree."""
    for i, (mine, theirs) in enumerate(zip(a.steps, b.steps)):
        if mine != theirs:
            return tr("step {step}: {mine} against {theirs}", step=i + 1, mine=short(mine, 200),
                      theirs=short(theirs, 200))
    if len(a.steps) != len(b.steps):
        return tr("{mine} steps against {theirs}", mine=len(a.steps), theirs=len(b.steps))
    for i, (mine, theirs) in enumerate(zip(a.tokens, b.tokens)):
        if mine != theirs:
            return tr("request {i}: {mine} against {theirs}", i=i, mine=short(mine, 200), theirs=short(theirs, 200))
    return ""


NO_FORK = tr("your block manager passed chapter 2 but has no fork yet: the capstone's request with n = 3 forks its "
             "samples, so the shipped manager serves this run; chapter 7 adds fork and copy-on-write to your file")


def _interpreted_kernel(instead: Message) -> Message:
    """The note for a decode kernel of yours set aside while Triton runs in its interpreter."""
    return tr("the decode kernel is yours, but Triton runs it in its interpreter on this CPU (ten seconds or more a "
              "decode step of SmolLM2's 30 layers): the capstone's attention is {instead} instead; on a CUDA machine "
              "your kernel runs", instead=instead)


def capstone_parts(parts: Parts, *, kernel: bool | None = None) -> tuple[Parts, Message | str]:
    """The parts the capstone serves with, and a note for each part set aside: all of ``parts``, except

    - a decode kernel of yours while Triton runs in its interpreter (``kernel=None``: only on a GPU; True: always).
      The interpreter runs each of a launch's programs one after another in Python, which is right for
      grading and far too slow for fifty requests: the attention is then your chapter-3 gather if it is
      yours, else the shipped torch path (chapter 5 ran your kernel inside the decoder, on a few tokens);
    - a block manager of yours that cannot fork yet (chapter 2's, before chapter 7 adds ``fork``): the
      capstone's request with n = 3 needs it, so the shipped manager serves instead.

    The note says so, and so does the returned parts' report card.
    """
    from .. import runtime

    card, notes, changes = parts.card, [], {}
    aside: dict[str, Message] = {}
    manager = card["block_manager"]
    if manager.yours and parts.manager_class.fork is ManagerBase.fork:
        aside["block_manager"] = tr("set aside for the capstone: it cannot fork yet (chapter 7), and n = 3 needs it")
        changes["manager_class"] = BlockManager
        notes.append(NO_FORK)
    if card["decode_kernel"].yours and not (runtime.BACKEND == "cuda" if kernel is None else kernel):
        gather = card["gather"]
        if gather.yours:
            from .ch3 import gather_attention

            changes["attention"], instead = gather_attention(gather.value), tr("your chapter-3 gather")
        else:
            changes["attention"], instead = "torch", tr("the shipped torch path")
        aside["decode_kernel"] = tr("set aside for the capstone: Triton's interpreter (the attention is {instead})",
                                    instead=instead)
        notes.append(_interpreted_kernel(instead))
    if not aside:
        return parts, ""
    choices = [dataclasses.replace(c, yours=False, why=aside[c.part.name]) if c.part.name in aside else c
               for c in card.choices]
    return (dataclasses.replace(parts, card=ReportCard(choices, card.directory), **changes),
            _joined(notes, semicolons=True))


def yours_summary(card: ReportCard) -> Message:
    """What the report card says about this run, in one sentence: how many parts were yours and how many lines
    of your code the engine ran, or, when none was, that the comparison then ran the shipped code twice."""
    yours, total = card.yours, len(card.choices)
    if not yours:
        return tr("none of the {total} parts is yours in this run: both engines ran the shipped parts, so the "
                  "comparison above checks the capstone's machinery, not your code; once your files pass their "
                  "chapters' graders, run this notebook again and your parts serve the same fifty requests",
                  total=total)
    shipped = [c.part.name for c in card.choices if not c.yours]
    if shipped:
        return tr("{count} of {total} parts are yours ({yours}): the engine ran {lines} lines of your code; "
                  "shipped: {shipped}", count=len(yours), total=total, yours=_joined(yours), lines=card.your_lines,
                  shipped=_joined(shipped))
    return tr("{count} of {total} parts are yours ({yours}): the engine ran {lines} lines of your code, every part "
              "of it", count=len(yours), total=total, yours=_joined(yours), lines=card.your_lines)


def transformers_greedy(model: Any, prompts: Sequence[Sequence[int]], max_tokens: Sequence[int]) -> list[list[int]]:
    """transformers' own greedy ``generate`` on the prompts as one left-padded batch, each cut where the engine
    stops it: after its ``max_tokens``, or at its first stop token (which it keeps, as the engine does)."""
    import torch

    hf, pad = model.hf_model, model.tokenizer.pad_token_id or 0
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(list(prompt))
        mask[row, width - len(prompt):] = 1
    with torch.inference_mode():
        out = hf.generate(input_ids=ids.to(hf.device), attention_mask=mask.to(hf.device), max_new_tokens=max(max_tokens),
                          do_sample=False, pad_token_id=pad)
    stops = set(model.stop_token_ids)
    tokens = []
    for row, n in enumerate(max_tokens):
        new = out[row, width:width + n].tolist()
        end = next((k + 1 for k, t in enumerate(new) if t in stops), len(new))
        tokens.append(new[:end])
    return tokens


__all__ = ["Capstone", "CountingRunner", "Decision", "FAILED", "HIDDEN_STEP_CASES", "STEP_CASES", "STEP_FILE", "Req",
           "Served", "StepCase", "StepLog", "StepView", "capstone_parts", "capstone_workload", "check_step",
           "first_difference", "serve", "transformers_greedy", "try_step", "watch_step", "yours_summary"]
