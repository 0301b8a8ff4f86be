"""The rendered book: every chapter in the table of contents becomes a page with its figures.

The book renders the committed outputs (``execute_notebooks: off``): the outputs nbval checked in
``make test`` are the ones readers see, and nothing is re-timed at build time while the prose around
it stays fixed. This test builds it the same way, which checks the configuration, the table of
contents (the claims ledger included) and figure rendering in seconds rather than minutes.
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


# Chapters whose learning goals and recap are also given in Traditional Chinese (issue 12, section 6).
BILINGUAL = ["notebooks/00_why_kv_cache", "notebooks/01_contiguous_cache", "notebooks/02_block_pool_and_tables",
             "notebooks/03_paged_attention_torch", "notebooks/04_triton_decode_kernel",
             "notebooks/05_paged_llama_decoder", "notebooks/06_continuous_batching", "notebooks/07_sharing_blocks",
             "notebooks/08_prefix_caching", "notebooks/09_block_size", "notebooks/10_textbook_to_production",
             "notebooks/11_prefix_aware_routing"]


def test_the_book_shows_committed_outputs() -> None:
    config = yaml.safe_load((ROOT / "book/_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "off"


def test_the_toc_has_the_ledger_and_the_renumbered_chapters() -> None:
    files = _toc_files()
    assert "book/ledger" in files
    assert "notebooks/09_block_size" in files and "notebooks/10_textbook_to_production" in files
    assert "notebooks/11_prefix_aware_routing" in files
    assert all((ROOT / f"{f}.ipynb").exists() or (ROOT / f"{f}.md").exists() for f in files), files


@pytest.mark.parametrize("entry", BILINGUAL)
def test_chapters_have_goals_and_recap_in_traditional_chinese(entry: str) -> None:
    nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "本章學習目標" in text and "重點回顧" in text
    assert "准入" not in text                           # Taiwan usage: 允入
    assert not re.search(r"[Ss]eed[ -]?00[04]", text)   # the articles are named, never "seed 000"


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
