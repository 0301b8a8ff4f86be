"""``bench widgets``: every experiment widget is listed, built as its chapter builds it, and each redraw timed."""

from __future__ import annotations

import json
from typing import Any

import ipywidgets as widgets

from pagedkv_edu.bench import widgets as bench
from pagedkv_edu.cli import main


class Counting(widgets.VBox):
    """A stand-in widget: one slider, a message, and a redraw that counts itself."""

    def __init__(self) -> None:
        self.level = widgets.IntSlider(value=0, min=0, max=10)
        self.message = widgets.HTML()
        self.redraws = 0
        self.level.observe(self._redraw, names="value")
        super().__init__(children=[self.level, self.message])

    def _redraw(self, change: Any) -> None:
        self.redraws += 1
        self.message.value = "refused" if change["new"] == 9 else ""

    def redraw_cases(self) -> list[tuple[str, object]]:
        return [("level", 3), ("level", 9)]


def test_each_case_is_applied_and_timed_and_a_refusal_is_reported() -> None:
    built: list[Counting] = []

    def build() -> Counting:
        built.append(Counting())
        return built[-1]
    timed = bench.time_widget(bench.WidgetSpec("0", build), repeats=3)
    assert [c["control"] for c in timed["cases"]] == ["level", "level"]
    assert [c["refused"] for c in timed["cases"]] == [False, True]
    # each repeat after the first sets the value back and forward again: 1 + 2 * 2 redraws a case
    assert built[0].redraws == 2 * (1 + 2 * 2) and timed["within_budget"]


def test_every_chapters_widget_is_listed() -> None:
    assert {name: spec.chapter for name, spec in bench.WIDGETS.items()} == {
        "wastes": "1", "softmax": "4", "scheduler": "6", "blocksize": "9", "routinglab": "11"}


def test_the_command_prints_json(capsys: Any) -> None:
    assert main(["bench", "widgets", "--widget", "softmax", "--repeats", "1", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    softmax = record["widgets"]["softmax"]
    assert record["benchmark"] == "widgets" and softmax["chapter"] == "4" and len(softmax["cases"]) >= 3
    assert all(0 <= c["best_seconds"] <= c["first_seconds"] for c in softmax["cases"]) and "commit" in record
