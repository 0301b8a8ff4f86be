"""Every notebook's "Your turn" cell, run as committed (with its stub), prints a neutral note and no case.

The cells are executed on their own, not through the notebook, so this holds whatever outputs the
notebooks were last executed with; the integrator's re-execution then commits the same text.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# The graders built on pagedkv_edu.exercises.grading (other exercise modules may print otherwise).
GRADER_IMPORT = re.compile(r"from pagedkv_edu\.exercises\.ch\d+(?:_\d+)? import check_")


def _grader_cells() -> list[tuple[str, int, str]]:
    cells = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and GRADER_IMPORT.search(source):
                cells.append((path.name, i, source))
    return cells


GRADER_CELLS = _grader_cells()


def test_every_grader_has_a_cell() -> None:
    assert len(GRADER_CELLS) == 15   # kv bytes, first fit, slot mapping, append, gather, chapter 4's online
    # softmax in PyTorch, step layout, admission, the scheduler's step, copy-on-write, beam fork-and-free, hash
    # chain, free-queue order, checked prefix lookup, last-block waste (chapter 4's Triton exercises are graded
    # by exercises.ch4, ch4_triton and ch4_kernel, and chapter 11's by exercises.ch11, which print their own notes)


@pytest.mark.parametrize("notebook, index, source", GRADER_CELLS, ids=[f"{n}:{i}" for n, i, _ in GRADER_CELLS])
def test_the_committed_stub_is_not_solved_and_shows_no_case(notebook: str, index: int, source: str) -> None:
    namespace: dict[str, object] = {}
    exec("import torch", namespace)   # chapters 3 and 4 import it in an earlier cell
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"{notebook}:{index}", "exec"), namespace)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and " not solved yet (" in lines[0] and lines[0].startswith("○ "), out.getvalue()
