"""The rendered book: every chapter in the table of contents becomes a page with its figures.

``make book`` re-executes every notebook (``execute_notebooks: force``); nbval already
re-executes them in ``make test``, so this test renders the committed outputs instead
(``execute_notebooks: off``), which checks the book's configuration, table of contents and
figure rendering in seconds rather than minutes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "book/_toc.yml").read_text())
    files = [toc["root"]]
    for entry in toc.get("chapters", []):
        files.append(entry["file"])
    return files


def _figures_in_notebook(path: Path) -> int:
    nb = json.loads(path.read_text())
    return sum(
        1
        for cell in nb["cells"] if cell["cell_type"] == "code"
        for out in cell.get("outputs", [])
        if any(k in out.get("data", {}) for k in ("image/png", "image/svg+xml"))
    )


@pytest.fixture(scope="module")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not JUPYTER_BOOK.exists():
        pytest.fail(f"jupyter-book is not installed next to {sys.executable}")
    out = tmp_path_factory.mktemp("book")
    config = yaml.safe_load((ROOT / "book/_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    config_path = out / "_config.yml"
    config_path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [str(JUPYTER_BOOK), "build", ".", "--config", str(config_path), "--toc", "book/_toc.yml",
         "--path-output", str(out), "--warningiserror", "--keep-going"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    yield out / "_build" / "html"
    shutil.rmtree(out, ignore_errors=True)


def test_every_toc_entry_has_a_page(built_book: Path) -> None:
    for entry in _toc_files():
        assert (built_book / f"{entry}.html").exists(), f"no page for {entry}"


@pytest.mark.parametrize("entry", [e for e in _toc_files() if e.startswith("notebooks/")])
def test_chapter_pages_show_their_figures(built_book: Path, entry: str) -> None:
    html = (built_book / f"{entry}.html").read_text()
    expected = _figures_in_notebook(ROOT / f"{entry}.ipynb")
    shown = len(re.findall(r"<img [^>]*src=\"[^\"]+\.(?:png|svg)\"", html))
    assert shown >= expected, f"{entry}: {shown} figures on the page, {expected} in the notebook"
    assert "Traceback" not in html
