"""``python -m pagedkv_edu bench widgets``: how long each experiment widget takes to build and to redraw.

The widgets that rerun an experiment (chapters 1, 4, 6, 9, 11) promise a redraw in about two
seconds on a 2-core CPU. Each is built as its chapter builds it, then every change in its own
``redraw_cases()`` is applied the way a reader's click applies it (setting the control's value,
which runs the widget's handler at once), and timed: the first time, which is what a reader waits
for, and the best of a few repeats. Time it on an idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..cli_args import add_json_flag, whole_number
from . import add_out_flag, emit, heading, metadata

REDRAW_BUDGET_S = 2.0


@dataclass(frozen=True)
class WidgetSpec:
    """A widget, built as its chapter builds it."""

    chapter: str
    build: Callable[[], Any]


def _wastes() -> Any:
    from ..paper_workloads import FIGURE_2_KV_UTILISATION
    from ..viz.wastes_widget import WastesWidget
    from ..workload import copilot50
    return WastesWidget(copilot50(seed=0), FIGURE_2_KV_UTILISATION)


def _online_softmax() -> Any:
    from ..viz.online_softmax_widget import OnlineSoftmaxWidget
    return OnlineSoftmaxWidget()


def _scheduler() -> Any:
    from ..viz.scheduler_widget import SchedulerWidget
    return SchedulerWidget()


def _block_size() -> Any:
    from ..viz.block_size_view import BlockSizeState
    from ..viz.block_size_widget import BlockSizeWidget
    from ..workload import copilot50
    return BlockSizeWidget(BlockSizeState(copilot50(seed=0)))


def _routing_lab() -> Any:
    from ..viz.routing_lab_widget import RoutingLabWidget
    return RoutingLabWidget("tenants", 600.0, num_replicas=4)


WIDGETS: dict[str, WidgetSpec] = {
    "wastes": WidgetSpec("1", _wastes),
    "softmax": WidgetSpec("4", _online_softmax),
    "scheduler": WidgetSpec("6", _scheduler),
    "blocksize": WidgetSpec("9", _block_size),
    "routinglab": WidgetSpec("11", _routing_lab),
}
"""The experiment widgets by name, in chapter order, each built with its chapter's arguments."""


def time_widget(spec: WidgetSpec, repeats: int = 1) -> dict[str, Any]:
    """Seconds to build ``spec``'s widget, and each redraw case's seconds: the first time (what a reader waits
    for; a widget may keep what it computed, so a second visit can be quicker) and the best of ``repeats``."""
    start = time.perf_counter()
    widget = spec.build()
    built = time.perf_counter() - start
    cases = []
    for attr, value in widget.redraw_cases():
        control = getattr(widget, attr)
        before = control.value
        times = []
        for i in range(repeats):
            if i:
                control.value = before     # back, then forward again: each repeat redraws
            start = time.perf_counter()
            control.value = value
            times.append(time.perf_counter() - start)
        cases.append({"control": attr, "value": repr(value), "first_seconds": round(times[0], 3),
                      "best_seconds": round(min(times), 3), "refused": bool(widget.message.value)})
    first = [c["first_seconds"] for c in cases]
    return {"chapter": spec.chapter, "build_seconds": round(built, 3), "cases": cases,
            "median_seconds": round(statistics.median(first), 3), "max_seconds": max(first),
            "within_budget": max(first) <= REDRAW_BUDGET_S}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("widgets", help="build and redraw time of each experiment widget (ch. 1, 4, 6, 9, 11)")
    p.add_argument("--widget", choices=[*WIDGETS, "all"], default="all")
    p.add_argument("--repeats", type=whole_number(1, 20), default=2, help="best of this many redraws per case")
    add_json_flag(p)
    add_out_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict[str, Any]:
    names = list(WIDGETS) if args.widget == "all" else [args.widget]
    record = metadata("widgets")
    record.update({"redraw_budget_seconds": REDRAW_BUDGET_S, "repeats": args.repeats,
                   "widgets": {n: time_widget(WIDGETS[n], args.repeats) for n in names}})
    return emit(args, record, _print_table)


def _print_table(record: dict[str, Any]) -> None:
    print(heading("widget build and redraw times", record))
    print(f"{'widget':14s}{'chapter':>8s}{'build s':>9s}{'first redraw s: median':>24s}{'max':>7s}  "
          f"cases (first / best of {record['repeats']})")
    for name, w in record["widgets"].items():
        cases = ", ".join(f"{c['control']}={c['value']} {c['first_seconds']:.2f}/{c['best_seconds']:.2f}"
                          f"{' (refused)' if c['refused'] else ''}" for c in w["cases"])
        print(f"{name:14s}{w['chapter']:>8s}{w['build_seconds']:>9.2f}{w['median_seconds']:>24.2f}"
              f"{w['max_seconds']:>7.2f}  {cases}")
