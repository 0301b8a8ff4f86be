"""Two or more simulated runs of one workload side by side, as the text table chapter 2 prints.

Chapter 2 changes only the memory policy between its runs, so the table puts one run per column
and one measure per row: the reader compares across a row. The rows are the figures the chapter's
argument uses (utilisation and each kind of waste, how many requests the budget held, what the
queue cost), in that order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..sim.simulate import WASTE_KINDS, SimResult

ROWS: tuple[tuple[str, Callable[[SimResult], str]], ...] = (
    ("utilisation", lambda r: f"{r.utilisation:.1%}"),
    *((f"waste: {kind}", lambda r, k=kind: f"{r.waste_fractions[k]:.1%}") for kind in WASTE_KINDS),
    ("peak concurrency", lambda r: f"{r.peak_concurrency}"),
    ("running while others wait", lambda r: f"{r.saturated_concurrency:.1f}"),
    ("mean queue delay (steps)", lambda r: f"{r.mean_queue_delay:.0f}"),
    ("preemptions", lambda r: f"{r.preemptions}"),
    ("steps to serve all {n}", lambda r: f"{r.total_steps}"),
)
"""(label, how one run shows it): the table's rows, top to bottom; ``{n}`` in a label is the runs' request count."""

LABEL_WIDTH, COLUMN_WIDTH = 26, 12


def policy_table(runs: Mapping[str, SimResult]) -> str:
    """``runs`` (column heading -> run) as a fixed-width table: a heading line, then one line per row of :data:`ROWS`.

    Fixed widths, so that the notebook's printed output lines up and the ledger can quote one row
    verbatim (``waste: external ... 0.0% 0.0%``).
    """
    n = len(next(iter(runs.values())).requests)
    lines = ["".join([" " * LABEL_WIDTH, *(f"{name:>{COLUMN_WIDTH}s}" for name in runs)])]
    for label, show in ROWS:
        lines.append("".join([f"{label.format(n=n):{LABEL_WIDTH}s}", *(f"{show(run):>{COLUMN_WIDTH}s}" for run in runs.values())]))
    return "\n".join(lines)
