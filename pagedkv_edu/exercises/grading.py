"""What every grader shares: shown and hidden cases, the unsolved stub, values judged not spellings.

Hidden seeded cases keep a table of the shown answers, or a trick right only at the chapter's
block size, from passing; only the first failure is printed. A stub gets a neutral "not solved
yet" and no case list, so a notebook committed with its stub shows no answers.
"""

from __future__ import annotations

import numbers
import random
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from . import report
from .messages import Message, tr


class NotSolved(Exception):
    """The reader's function is still the stub; the message says how it showed."""


class Raised(Exception):
    """The reader's function raised ``error``; graders catch it to add context (which step)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(describe_exception(error))
        self.error = error


def describe_exception(error: BaseException) -> str:
    """``ZeroDivisionError: division by zero, at `return 1 / 0``` (the line the reader's code raised on).

    The line is the innermost one outside this module and the installed libraries (numpy, torch,
    the standard library), which is the reader's own line even when the error surfaced deeper.
    """
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if f.filename != __file__ and "site-packages" not in f.filename and "/lib/python3" not in f.filename]
    line = frames[-1].line if frames else ""
    if line and len(line) < 120:
        return tr("raised {kind}: {error}, at `{line}`", kind=type(error).__name__, error=str(error), line=line.strip())
    return tr("raised {kind}: {error}", kind=type(error).__name__, error=str(error))


class Case(Protocol):
    name: str


C = TypeVar("C", bound=Case)


class Reader:
    """The reader's function, called through this wrapper so the grader sees stubs and exceptions."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls = 0
        self.results: list[Any] = []

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        try:
            result = self.fn(*args)
        except NotImplementedError as exc:
            if self.calls == 1:
                raise NotSolved(tr("it raises NotImplementedError")) from exc
            raise Raised(exc) from exc
        except Exception as exc:  # the reader's code may raise anything: it is a failure, not a crash
            raise Raised(exc) from exc
        if len(self.results) < 64:
            self.results.append(result)
        return result


def grade(name: str, fn: Callable[..., Any], shown: Sequence[C], hidden: Sequence[C],
          run: Callable[[Reader, C], list[str]], *, constant_is_stub: bool = False) -> bool:
    """Run ``run(reader, case)`` (which returns what is wrong, or []) on every case; print the verdict.

    ``constant_is_stub``: for graders of one number, an answer that is the same for every shown
    case (``return False``, ``return -1``) is a stub, not an attempt.
    """
    reader = Reader(fn)
    try:   # the shown cases come first: a stub is recognised on them, before any hidden case runs
        failing = [(case, lines) for case in shown if (lines := _run_one(run, reader, case))]
        if failing and reader.results and all(r is None for r in reader.results):
            raise NotSolved(tr("it returns None"))
        if constant_is_stub and failing and len(reader.results) == reader.calls and len(shown) > 2:
            first = reader.results[0]
            if all(type(r) is type(first) and _same(r, first) for r in reader.results):
                raise NotSolved(tr("it returns {value} whatever it is given", value=repr(first)))
    except NotSolved as stub:
        return report(name, [], not_solved=str(stub))
    hidden_failing = [(case, lines) for case in hidden if (lines := _run_one(run, reader, case))]
    if not failing and not hidden_failing:
        return report(name, [], shown=len(shown), hidden=len(hidden))
    (case, lines) = (failing or hidden_failing)[0]
    out = [tr("{case}:", case=case.name)] + [f"  {line}" for line in lines]
    also = [str(tr('"{case}"', case=c.name)) for c, _ in failing[1:]]     # rendered now: join reads the value
    others_hidden = len(hidden_failing) - (0 if failing else 1)
    if others_hidden:
        also.append(str(tr("{count} of {total} hidden cases", count=others_hidden, total=len(hidden))))
    if also:
        out.append(tr("also wrong: {cases}", cases=str(tr(", ")).join(also)))
    return report(name, out)


def rows_to_first_difference(step: Callable[[int], Any], expected: Iterable[Any],
                             differences: Callable[[Any, Any], list[str]], caught: type[BaseException],
                             describe: Callable[[Any], str]) -> list[dict[str, Any]]:
    """What a ``try_*`` helper of a step-by-step grader returns: for each reference step (``.step``,
    ``.before``), the reader's result ``step(n)`` beside the expected one, through the first step that differs
    or raised ``caught`` (described by ``describe``) or showed the stub."""
    rows = []
    for want in expected:
        try:
            got, problem = step(want.step), ""
        except caught as error:
            got, problem = None, describe(error)
        except NotSolved as stub:
            got, problem = None, tr("not solved yet ({why})", why=stub.args[0] if stub.args else "")
        before = str(want.before) if isinstance(want.before, Message) else want.before   # a dict shows its repr
        rows.append({"step": want.step, "before": before, "yours": got, "expected": want,
                     "problem": str(problem)})
        if got is None or differences(got, want):
            break
    return rows


def grade_in_order(name: str, cases: Sequence[C], run: Callable[[C], list[str]], *, passed: str = "") -> bool:
    """Run costly cases (kernels in the interpreter) in order and stop at the first failure.

    ``run(case)`` returns what is wrong, or [], and raises :class:`NotSolved` for a stub;
    ``passed`` replaces the name in the verdict of a pass.
    """
    try:
        for i, case in enumerate(cases):
            problems = run(case)
            if problems:
                return report(name, [tr("{case}:", case=case.name)] + [f"  {p}" for p in problems]
                              + [tr("({passed} of {total} cases passed before this one; later cases not run)",
                                    passed=i, total=len(cases))])
    except NotSolved as stub:
        return report(name, [], not_solved=str(stub))
    return report(passed or tr("{name} ({count} cases)", name=name, count=len(cases)), [])


def _run_one(run: Callable[[Reader, C], list[str]], reader: Reader, case: C) -> list[str]:
    try:
        return run(reader, case)
    except Raised as exc:
        return [str(exc)]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:   # an array's == is not a bool: not a constant we can judge
        return False


def seeded(count: int, seed: int, draw: Callable[[random.Random, int], C]) -> list[C]:
    """``count`` hidden cases, case ``i`` drawn by ``draw(rng, i)`` from one generator seeded with ``seed``:
    the same cases in every run, so a failure can be reported and reproduced."""
    rng = random.Random(seed)
    return [draw(rng, i) for i in range(count)]


# --- values, not spellings -------------------------------------------------------------------------

def as_int(x: Any) -> int | None:
    """The whole number ``x`` stands for (int, numpy integer, whole float, one-element tensor), else None.

    A bool is not a count, so True is not 1 here.
    """
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (torch.Tensor, np.ndarray)):
        if x.ndim != 0 or x.dtype in (torch.bool, np.bool_):
            return None
        return as_int(x.item())
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        f = float(x)
        return int(f) if f == f and abs(f) != float("inf") and f.is_integer() else None
    return None


def as_bool(x: Any) -> bool | None:
    """True or False for a Python, numpy or 0-d tensor bool; None for anything else (1 is not a bool)."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (torch.Tensor, np.ndarray)) and x.ndim == 0 and x.dtype in (torch.bool, np.bool_):
        return bool(x.item())
    return None


def as_int_list(x: Any, what: str | None = None) -> tuple[list[int] | None, str]:
    """``x`` as a list of whole numbers, or (None, why not). Tensors and arrays need an integer dtype.

    ``what`` names one item, as ``tr("slot")``, so that the reason reads in the reader's language.
    """
    what = tr("value") if what is None else what
    if isinstance(x, (torch.Tensor, np.ndarray)):
        if x.ndim != 1:
            return None, tr("expected a flat list of {what}s, got a tensor of shape {shape}", what=what,
                            shape=tuple(x.shape))
        if len(x) == 0:
            return [], ""
        if isinstance(x, torch.Tensor) and (x.dtype.is_floating_point or x.dtype == torch.bool) or \
                isinstance(x, np.ndarray) and x.dtype.kind not in "iu":
            return None, tr("expected integer {what}s, got a tensor of dtype {dtype} "
                            "(give it an integer dtype, e.g. torch.long)", what=what, dtype=x.dtype)
        return [int(v) for v in x.tolist()], ""
    if x is None or isinstance(x, (str, bytes, dict)) or not isinstance(x, Iterable):
        return None, tr("expected a list of {what}s, got {value}", what=what, value=short(x))
    out = []
    for i, v in enumerate(x):
        n = as_int(v)
        if n is None:
            return None, tr("item {i} is {value}, not a whole-number {what}", i=i, value=short(v), what=what)
        out.append(n)
    return out, ""


def short(x: Any, limit: int = 60) -> str:
    """A repr short enough for one line of a diff."""
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def span(values: Sequence[int]) -> str:
    """``0..40`` for a run of consecutive numbers, else the list, shortened."""
    values = list(values)
    if not values:
        return tr("[] (none)")
    if len(values) > 2 and values == list(range(values[0], values[0] + len(values))):
        return f"{values[0]}..{values[-1]}"
    return short(values, 80)


class ArgsCase:
    """A case that is just a name and the arguments the reader's function is called with."""

    __slots__ = ("name", "args")

    def __init__(self, name: str, args: tuple[Any, ...]) -> None:
        self.name = name
        self.args = args

    def __repr__(self) -> str:
        return f"ArgsCase({self.name!r}, {self.args!r})"
