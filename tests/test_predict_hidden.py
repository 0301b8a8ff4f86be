"""Predict, then run: the rendered book must not show a prediction's answer before the reader runs the cell.

A prediction cell assigns the reader's guess (``my_x = None   # your prediction``). Every code cell after
it, up to and including the first one that reads the guess, prints or plots the measured answer, so each
carries the cell tag ``hide-output``: Jupyter Book then folds its committed output behind a toggle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]*_*.ipynb"))   # part notebooks too (06b_...)
# The reader's guess: a cell of nothing but ``my_x = None`` (or a dict of guesses) lines and comments.
GUESS = re.compile(r"(?:my_\w+|prediction)\s*=\s*(?:None\b|\{).*")
ASSIGNED = re.compile(r"^([A-Za-z_]\w*)\s*=", re.MULTILINE)


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def reveal_cells(nb: dict) -> list[tuple[int, int]]:
    """(prediction cell, revealing cell) index pairs: the code cells after each prediction, through the first that reads it."""
    cells = nb["cells"]
    out = []
    for i, cell in enumerate(cells):
        lines = [line for line in _source(cell).splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if cell["cell_type"] != "code" or not lines or not all(GUESS.fullmatch(line) for line in lines):
            continue
        names = ASSIGNED.findall(_source(cell))
        assert names, f"cell {i}: a prediction cell that assigns nothing"
        for j in range(i + 1, len(cells)):
            if cells[j]["cell_type"] != "code":
                continue
            out.append((i, j))
            if any(re.search(rf"\b{re.escape(n)}\b", _source(cells[j])) for n in names):
                break
        else:
            raise AssertionError(f"cell {i}: no later cell reads {names}")
    return out


def test_the_rule_finds_the_predictions() -> None:
    found = {nb.name: reveal_cells(json.loads(nb.read_text(encoding="utf-8"))) for nb in NOTEBOOKS}
    assert sum(len({i for i, _ in pairs}) for pairs in found.values()) >= 10, found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_answers_are_hidden_until_run(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    shown = [j for _, j in reveal_cells(nb) if "hide-output" not in nb["cells"][j].get("metadata", {}).get("tags", [])]
    assert not shown, f"{path.name}: cells {shown} print a prediction's answer without the tag hide-output"
