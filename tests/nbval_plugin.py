"""pytest plugin for the notebook run: what nbval compares, and how long each chapter took.

Loaded with ``-p tests.nbval_plugin`` by ``make test``. Cells tagged ``nbval-check-output``
are compared on their printed text; rich outputs (HTML, SVG, widget state) and stderr are
not, because they carry ids and warnings that change between runs and versions.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

_durations: dict[str, float] = defaultdict(float)
_started = time.perf_counter()

SKIP_OUTPUTS = ("text/html", "image/svg+xml", "image/png", "stderr",
                "application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


def pytest_collectstart(collector: Any) -> None:
    if str(getattr(collector, "path", "")).endswith(".ipynb"):
        collector.skip_compare = tuple(collector.skip_compare) + SKIP_OUTPUTS


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    notebook = report.nodeid.split("::", 1)[0]
    if notebook.endswith(".ipynb"):
        _durations[notebook] += report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _durations:
        return
    terminalreporter.section("notebook durations (kernel start + every cell)")
    for notebook, seconds in sorted(_durations.items()):
        terminalreporter.write_line(f"{seconds:7.1f} s  {notebook}")
    terminalreporter.write_line(f"{sum(_durations.values()):7.1f} s  total")
