"""Graders for the book's "Your turn" exercises: each ``check_*`` prints a verdict and returns it as a bool.

The shared machinery (hidden cases, stub detection, values judged not spellings) is in
:mod:`pagedkv_edu.exercises.grading`; :func:`report` prints the verdict.
"""

from __future__ import annotations


RESULTS: dict[str, bool] = {}
"""Every grader's latest verdict in this process, by exercise name: what a chapter says is the reader's."""


def report(name: str, failures: list[str], *, not_solved: str | None = None, shown: int = 0,
           hidden: int = 0) -> bool:
    """Print a grader's verdict, record it in :data:`RESULTS` and return it: a tick, a cross with the
    lines of ``failures``, or, when ``not_solved`` says how the function showed itself to be the stub,
    a neutral note.

    ``shown`` and ``hidden`` (optional) are the numbers of cases a passing function was tried on.
    """
    key = name.split(" (")[0]
    if not_solved is not None:
        RESULTS[key] = False
        print(f"○ {name}: not solved yet ({not_solved}). Write your version above and run the cell again.")
        return False
    RESULTS[key] = not failures
    if not failures:
        tried = f" ({shown} cases from the text and {hidden} hidden random ones)" if hidden else ""
        print(f"✓ {name}: passed{tried}")
        return True
    print(f"✗ {name}: failed")
    for line in failures:
        print("  " + line)
    return False
