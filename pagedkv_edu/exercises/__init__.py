"""Graders for the book's "Your turn" exercises: each ``check_*`` prints a verdict and returns it as a bool.

The shared machinery (hidden cases, stub detection, values judged not spellings) is in
:mod:`pagedkv_edu.exercises.grading`; :func:`report` prints the verdict.
"""

from __future__ import annotations

from .messages import say


RESULTS: dict[str, bool] = {}
"""Every grader's latest verdict in this process, by exercise name: what a chapter says is the reader's."""


def report(name: str, failures: list[str], *, not_solved: str | None = None, shown: int = 0,
           hidden: int = 0) -> bool:
    """Print a grader's verdict, record it in :data:`RESULTS` and return it: a tick, a cross with the
    lines of ``failures``, or, when ``not_solved`` says how the function showed itself to be the stub,
    a neutral note. The verdict is in the reader's language (:mod:`.messages`), and so are the failure's
    lines when they are :class:`~.messages.Message` objects (``tr(...)``): each is rendered as it is printed.

    ``shown`` and ``hidden`` (optional) are the numbers of cases a passing function was tried on.
    """
    key = name.split(" (")[0]
    if not_solved is not None:
        RESULTS[key] = False
        print(say("not_solved", name=name, why=not_solved))
        return False
    RESULTS[key] = not failures
    if not failures:
        print(say("passed_cases", name=name, shown=shown, hidden=hidden) if hidden else say("passed", name=name))
        return True
    print(say("failed", name=name))
    for line in failures:
        print(f"  {line}")
    return False
