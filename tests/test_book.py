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
             "notebooks/03_paged_attention_torch", "notebooks/04_triton_pieces",
             "notebooks/04b_triton_decode_kernel",
             "notebooks/05_paged_llama_decoder", "notebooks/06_continuous_batching",
             "notebooks/06b_measuring_an_engine", "notebooks/07_sharing_blocks",
             "notebooks/08_prefix_caching", "notebooks/09_block_size", "notebooks/10_textbook_to_production",
             "notebooks/11_prefix_aware_routing", "notebooks/12_your_engine"]


def test_the_book_shows_committed_outputs() -> None:
    config = yaml.safe_load((ROOT / "book/_config.yml").read_text())
    assert config["execute"]["execute_notebooks"] == "off"


def test_the_toc_has_the_ledger_and_the_renumbered_chapters() -> None:
    files = _toc_files()
    assert "book/ledger" in files
    assert "notebooks/09_block_size" in files and "notebooks/10_textbook_to_production" in files
    assert "notebooks/11_prefix_aware_routing" in files and "notebooks/12_your_engine" in files
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


# --- Traditional Chinese: each chapter's key argument, and one term per concept (issue 19, section 5) ---
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")
VARIANTS: dict[str, tuple[str, re.Pattern[str]]] = {   # concept: (the glossary's term, a variant that must not appear)
    "fork": ("分岔", re.compile("分叉")),
    "eviction": ("逐出", re.compile("淘汰")),
    "prefill": ("預填充", re.compile("預填(?!充)")),
    "occupy": ("佔", re.compile("占")),
}
VARIANTS_HEADING = "## One term, one spelling"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _variants_in(text: str) -> list[str]:
    found = []
    for concept, (term, pattern) in VARIANTS.items():
        for m in pattern.finditer(text):
            found.append(f"{m.group()!r} for {concept} (use {term}) in …{text[max(0, m.start() - 15):m.end() + 15]}…")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_has_its_key_argument_in_traditional_chinese(path: Path) -> None:
    tagged = [c for c in _cells(path) if c["cell_type"] == "markdown" and "zh-tw-key" in c.get("metadata", {}).get("tags", [])]
    assert tagged, f"{path.name}: no markdown cell tagged 'zh-tw-key' (the chapter's key argument in zh-TW)"
    assert any(len(CJK.findall("".join(c["source"]))) >= 80 for c in tagged), \
        f"{path.name}: its 'zh-tw-key' cells hold fewer than 80 CJK characters: a paragraph, not a label"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_notebook_uses_a_variant_of_a_glossary_term(path: Path) -> None:
    found = [f"cell {i}: {v}" for i, c in enumerate(_cells(path)) for v in _variants_in("".join(c["source"]))]
    assert not found, f"{path.name} uses a variant of a glossary term:\n" + "\n".join(found)


def test_the_glossary_lists_the_variants_and_uses_none_of_them() -> None:
    glossary = (ROOT / "book/glossary.md").read_text(encoding="utf-8")
    entries, _, table = glossary.partition(VARIANTS_HEADING)
    assert table, f"book/glossary.md has no '{VARIANTS_HEADING}' section"
    assert not _variants_in(entries), "book/glossary.md's entries use a variant:\n" + "\n".join(_variants_in(entries))
    for concept, (term, pattern) in VARIANTS.items():
        row = next((line for line in table.splitlines() if line.startswith(f"| {concept}")), None)
        assert row is not None and term in row and pattern.search(row.split("|")[3]), f"no row for {concept}: {row}"


def test_the_variant_check_catches_each_variant() -> None:
    for bad in ("分叉", "淘汰", "預填的", "占用"):
        assert _variants_in(f"一段 {bad} 文字"), bad
    assert not _variants_in("分岔、逐出、預填充、佔用")
