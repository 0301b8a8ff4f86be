"""Two or more simulated runs of one workload side by side, as the text table chapter 2 prints.

Chapter 2 changes only the memory policy between its runs, so the table puts one run per column
and one measure per row: the reader compares across a row. The rows are the figures the chapter's
argument uses (utilisation and each kind of waste, how many requests the budget held, what the
queue cost), in that order.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping

from ..sim.simulate import WASTE_KINDS, SimResult
from .language import Message, tr

WASTE_LABELS: dict[str, Message] = {
    "over_reserved": tr("waste: over_reserved"),
    "internal": tr("waste: internal"),
    "external": tr("waste: external"),
}
"""Each kind of waste's row label, by its name in ``SimResult.waste_fractions``."""

ROWS: tuple[tuple[Callable[[int], Message], Callable[[SimResult], str]], ...] = (
    (lambda n: tr("utilisation"), lambda r: f"{r.utilisation:.1%}"),
    *((lambda n, k=kind: WASTE_LABELS[k], lambda r, k=kind: f"{r.waste_fractions[k]:.1%}") for kind in WASTE_KINDS),
    (lambda n: tr("peak concurrency"), lambda r: f"{r.peak_concurrency}"),
    (lambda n: tr("running while others wait"), lambda r: f"{r.saturated_concurrency:.1f}"),
    (lambda n: tr("mean queue delay (steps)"), lambda r: f"{r.mean_queue_delay:.0f}"),
    (lambda n: tr("preemptions"), lambda r: f"{r.preemptions}"),
    (lambda n: tr("steps to serve all {n}", n=n), lambda r: f"{r.total_steps}"),
)
"""(label, how one run shows it): the table's rows, top to bottom; a label is made from the runs' request count
``n``, and printed in the reader's language."""

LABEL_WIDTH, COLUMN_WIDTH = 26, 12


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal or a notebook's monospace output: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _left(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def _right(text: str, width: int) -> str:
    return " " * max(0, width - _width(text)) + text


def policy_table(runs: Mapping[str, SimResult]) -> str:
    """``runs`` (column heading -> run) as a fixed-width table: a heading line, then one line per row of :data:`ROWS`.

    Fixed widths, so that the notebook's printed output lines up and the ledger can quote one row
    verbatim (``waste: external ... 0.0% 0.0%``). The labels are in the reader's language, padded by the
    columns they take, so that the Chinese labels line up too.
    """
    n = len(next(iter(runs.values())).requests)
    lines = ["".join([" " * LABEL_WIDTH, *(_right(str(name), COLUMN_WIDTH) for name in runs)])]
    for label, show in ROWS:
        lines.append("".join([_left(str(label(n)), LABEL_WIDTH), *(_right(show(run), COLUMN_WIDTH) for run in runs.values())]))
    return "\n".join(lines)
