"""Every notebook's "Your turn" cell, run as committed (with its stub), prints a neutral note and no case.

The cells are executed on their own, not through the notebook, so this holds whatever outputs the
notebooks were last executed with; the integrator's re-execution then commits the same text. A grader
that reads the reader's file (chapter 6's ``my_engine/scheduler.py``) finds the stub its notebook's
``%%writefile`` cell above it saves, written into a fresh working directory.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# The graders built on pagedkv_edu.exercises.grading (other exercise modules may print otherwise).
GRADER_IMPORT = re.compile(r"from pagedkv_edu\.exercises\.ch\d+(?:_\d+)? import check_")
WRITEFILE = re.compile(r"%%writefile (\S+)\n")


def _grader_cells() -> list[tuple[str, int, str, dict[str, str]]]:
    """Each grader cell, with the files the ``%%writefile`` cells above it in its notebook save (path: text)."""
    cells = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        files: dict[str, str] = {}
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            saved = WRITEFILE.match(source) if cell["cell_type"] == "code" else None
            if saved:
                files[saved.group(1)] = source[saved.end():]
            elif cell["cell_type"] == "code" and GRADER_IMPORT.search(source):
                cells.append((path.name, i, source, dict(files)))
    return cells


GRADER_CELLS = _grader_cells()


def test_every_grader_has_a_cell() -> None:
    assert len(GRADER_CELLS) == 17   # kv bytes, first fit, slot mapping, append, the block manager (a saved
    # file), gather, chapter 4's online softmax in PyTorch, step layout, admission, the scheduler's step,
    # copy-on-write, beam fork-and-free, the sharing block manager (chapter 7's saved file), hash chain,
    # free-queue order, checked prefix lookup, last-block waste
    # (chapter 4's Triton exercises are graded by exercises.ch4, ch4_triton and ch4_kernel, and chapter 11's by
    # exercises.ch11, which print their own notes)


@pytest.mark.parametrize("notebook, index, source, files", GRADER_CELLS,
                         ids=[f"{n}:{i}" for n, i, _, _ in GRADER_CELLS])
def test_the_committed_stub_is_not_solved_and_shows_no_case(notebook: str, index: int, source: str,
                                                            files: dict[str, str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)   # where the notebook's %%writefile cells save, as in notebooks/
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    namespace: dict[str, object] = {}
    exec("import torch", namespace)   # chapters 3 and 4 import it in an earlier cell
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"{notebook}:{index}", "exec"), namespace)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and " not solved yet (" in lines[0] and lines[0].startswith("○ "), out.getvalue()


def test_chapter_8s_saved_prefix_cache_stub_is_not_solved_and_shows_no_case(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Chapter 8's file grader, ``ch8.check_prefix_cache`` (three verdicts, no ``check_`` import), on the saved stub."""
    cells = {cell.get("id"): "".join(cell["source"])
             for cell in json.loads((NOTEBOOKS / "08_prefix_caching.ipynb").read_text())["cells"]}
    magic, _, body = cells["c8-file-code"].partition("\n")
    assert magic == "%%writefile my_engine/prefix_cache.py"
    (tmp_path / "my_engine").mkdir()
    (tmp_path / "my_engine" / "prefix_cache.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cells["c8-file-check"], "08_prefix_caching.ipynb:c8-file-check", "exec"), {})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, out.getvalue()
    assert all(line.startswith("○ ") and " not solved yet (" in line for line in lines), out.getvalue()
    assert not (tmp_path / "my_engine" / "prefix_cache.py.passed").exists()


def test_chapter_2s_block_manager_stub_gives_nothing_away() -> None:
    """The saved stub holds the imports, the class, the three signatures and their contracts: none of the moves."""
    sources = ["".join(cell["source"])
               for cell in json.loads((NOTEBOOKS / "02_block_pool_and_tables.ipynb").read_text())["cells"]]
    stub = next(s for s in sources if s.startswith("%%writefile my_engine/block_manager.py\n"))
    assert "class BlockManager(ManagerBase):" in stub and stub.count('raise NotImplementedError("your turn")') == 3
    moves = ("allocate", "free_all", "pool.free(", "[::-1]", "reversed", "blocks_needed", "ceil", "//", "held[",
             "num_free", "return ")
    assert not [m for m in moves if m in stub], [m for m in moves if m in stub]


def test_chapter_6s_scheduler_stub_imports_what_it_uses_and_gives_nothing_away() -> None:
    """The saved stub is a file that imports on its own and defines ``schedule``; its code holds none of the moves."""
    sources = ["".join(cell["source"])
               for cell in json.loads((NOTEBOOKS / "06_continuous_batching.ipynb").read_text())["cells"]]
    stub = next(s for s in sources if s.startswith("%%writefile my_engine/scheduler.py\n"))
    assert "from pagedkv_edu.core.request import Status" in stub and "\ndef schedule(state" in stub
    code = [line for line in stub.splitlines()[1:] if line.strip() and not line.lstrip().startswith("#")]
    assert code[-1].strip().startswith("raise NotImplementedError")
    moves = ("for ", "while ", "if ", "popleft", "append", "return ", ".grow(", ".admit(", ".lookup(", ".preempt(")
    assert not [m for m in moves if any(m in line for line in code)], code


def test_chapter_3s_gather_stub_imports_what_it_uses_and_gives_nothing_away() -> None:
    """The saved stub is a file that imports torch and defines ``gather_kv``; its code holds none of the moves."""
    sources = ["".join(cell["source"])
               for cell in json.loads((NOTEBOOKS / "03_paged_attention_torch.ipynb").read_text())["cells"]]
    stub = next(s for s in sources if s.startswith("%%writefile my_engine/gather.py\n"))
    assert "import torch\n" in stub and "\ndef gather_kv(cache: torch.Tensor, block_table" in stub
    code = [line for line in stub.splitlines()[1:] if line.strip() and not line.lstrip().startswith(("#", '"""'))]
    assert code[-1].strip() == 'raise NotImplementedError("your turn")'
    moves = ("//", "%", "*", "reshape", "view", "flatten", "index", "arange", "for ", "return ")
    assert not [m for m in moves if any(m in line for line in code)], code


def test_chapter_7s_sharing_manager_stub_imports_what_it_uses_and_gives_nothing_away(tmp_path: Path) -> None:
    """The saved stub is the whole manager: a file that imports on its own, chapter 2's three methods and fork, each
    the stub the grader recognises; its code holds none of the moves, and its prose names none of the pool's calls."""
    from pagedkv_edu.core.block_manager import ManagerBase
    from pagedkv_edu.exercises.ch2 import is_stub, load_manager_class
    from pagedkv_edu.exercises.ch7 import fork_is_stub

    sources = ["".join(cell["source"])
               for cell in json.loads((NOTEBOOKS / "07_sharing_blocks.ipynb").read_text())["cells"]]
    stub = next(s for s in sources if s.startswith("%%writefile my_engine/block_manager.py\n"))
    body = stub.partition("\n")[2]
    (tmp_path / "block_manager.py").write_text(body)
    cls = load_manager_class(tmp_path / "block_manager.py")       # imports on its own, built on ManagerBase
    assert all(name in vars(cls) for name in ("admit", "grow", "release", "fork")) and issubclass(cls, ManagerBase)
    assert is_stub(cls) and fork_is_stub(cls) and body.count('raise NotImplementedError("your turn")') == 4
    prose = {i for node in ast.walk(ast.parse(body)) if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
             and ast.get_docstring(node) is not None for i in range(node.body[0].lineno, node.body[0].end_lineno + 1)}
    code = [line for i, line in enumerate(body.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#") and i not in prose]
    assert len(code) == 13 and code[-1].strip() == 'raise NotImplementedError("your turn")', code   # 4 imports, the
    # class, 4 signatures and 4 raises: nothing else
    moves = ("incref", "allocate", "free", "ref_counts", "held", "blocks_needed", "copies", "append", "//", "%",
             "for ", "if ", "return ", "[-1]")
    assert not [m for m in moves if any(m in line for line in code)], code
    assert not [m for m in ("incref", "allocate", "free_all", "pool.free", "ref_counts", "held[", "blocks_needed",
                            ".append", "//") if m in body]
