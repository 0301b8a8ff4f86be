"""The zh-TW edition cannot drift: every translated chapter is whole, fresh and faithful, and its notebook is generated.

``scripts/translations.py`` keeps one translation file per chapter, keyed by cell id with the hash of the English
cell each block translates, and generates ``notebooks/zh-TW/``. The zh-TW notebooks are not executed again: their
code cells and outputs are the English ones, which nbval executes (checked here, cell by cell).
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
T = runpy.run_path(str(ROOT / "scripts" / "translations.py"))
CHAPTERS = T["chapters"]()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_translation_is_whole_fresh_faithful_and_uses_the_glossary(chapter: str) -> None:
    notebook, translations = T["load"](chapter)
    assert T["problems"](notebook, translations) == []


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_generated_notebook_is_up_to_date(chapter: str) -> None:
    notebook, translations = T["load"](chapter)
    path = ROOT / "notebooks" / "zh-TW" / f"{chapter}.ipynb"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run python scripts/translations.py build"
    assert path.read_text(encoding="utf-8") == T["dumps"](T["generate"](notebook, translations, chapter)), \
        f"{path.relative_to(ROOT)} is stale: run python scripts/translations.py build"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_and_outputs_are_the_english_ones_and_every_cell_is_translated(chapter: str) -> None:
    english = json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    chinese = json.loads((ROOT / "notebooks" / "zh-TW" / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    assert [c["id"] for c in chinese["cells"]] == [c["id"] for c in english["cells"]]
    setups = 0
    for en, zh in zip(english["cells"], chinese["cells"]):
        if en["cell_type"] == "code":
            if T["SETUP"] in T["cell_source"](en):      # the one change: the graders' language
                setups += 1
                assert T["cell_source"](zh) == T["cell_source"](en).replace(T["SETUP"], T["ZH_SETUP"])
                zh = {**zh, "source": en["source"]}
            assert zh == en, f"code cell {en['id']} differs from the English one"
        else:
            assert T["CJK"].search(T["cell_source"](zh)), f"markdown cell {en['id']} has no Chinese"
    assert setups == 1, "the chapter's setup cell is not the one expected"


def test_every_zh_tw_notebook_has_its_translation() -> None:
    generated = sorted(p.stem for p in (ROOT / "notebooks" / "zh-TW").glob("*.ipynb"))
    assert generated == CHAPTERS


# --- the checks can fail -----------------------------------------------------------------------------
NOTEBOOK = {"cells": [
    {"cell_type": "markdown", "id": "a", "metadata": {}, "source": "A block holds 16 tokens; see `block_size`."},
    {"cell_type": "markdown", "id": "b", "metadata": {}, "source": "本章的關鍵論點：全是中文，不必翻譯，也不列入。"},
    {"cell_type": "code", "id": "c", "metadata": {}, "source": "x = 1", "outputs": [], "execution_count": None},
    {"cell_type": "markdown", "id": "d", "metadata": {}, "source": "The cache grew to 1,024 tokens.\n\n快取長到 1,024 個 token。"},
], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
TERMS = [("block", "區塊"), ("KV cache", "KV 快取")]


def _translations(**texts: str) -> dict[str, tuple[str, str]]:
    sources = dict(T["markdown_cells"](NOTEBOOK))
    return {cid: (T["source_hash"](sources[cid]), text) for cid, text in texts.items()}


def test_a_faithful_translation_passes_and_generates() -> None:
    good = _translations(a="一個區塊放 16 個 token；見 `block_size`。", d="快取長到 1024 個 token。")
    assert T["problems"](NOTEBOOK, good, TERMS) == []
    out = T["generate"](NOTEBOOK, good, "x")
    first, second = (T["cell_source"](c) for c in out["cells"][:2])
    assert first.startswith("一個區塊放 16 個 token；見 `block_size`。") and "[English edition 英文版](../x.ipynb)" in first
    assert second == NOTEBOOK["cells"][1]["source"]          # a cell all in Chinese is copied as it is
    assert out["cells"][2] == NOTEBOOK["cells"][2]


def test_an_edited_english_cell_makes_its_translation_stale() -> None:
    good = _translations(a="一個區塊放 16 個 token；見 `block_size`。", d="快取長到 1,024 個 token。")
    edited = json.loads(json.dumps(NOTEBOOK))
    edited["cells"][0]["source"] = "A block holds 16 tokens; see `block_size` (edited)."
    assert any("stale" in p and "cell a" in p for p in T["problems"](edited, good, TERMS))


def test_a_changed_number_a_lost_code_span_a_missing_cell_and_an_unused_term_fail() -> None:
    bad = _translations(a="一個區塊放 32 個 token。")
    found = T["problems"](NOTEBOOK, bad, TERMS)
    assert any("cell a: numbers or inline code differ: missing ['16', '`block_size`'], extra ['32']" in p for p in found)
    assert "cell d: no translation" in found
    off_glossary = _translations(a="一個塊放 16 個 token；見 `block_size`。", d="快取長到 1,024 個 token。")
    assert T["problems"](NOTEBOOK, off_glossary, TERMS) == ["cell a: the glossary's terms are not used: block -> 區塊"]


def test_a_malformed_file_is_refused() -> None:
    with pytest.raises(ValueError, match="text before the first"):
        T["parse"]("stray\n<!-- cell a en:0123456789ab -->\nx")
    with pytest.raises(ValueError, match="cell a is translated twice"):
        T["parse"]("<!-- cell a en:0123456789ab -->\nx\n<!-- cell a en:0123456789ab -->\ny")


def test_every_chapter_has_its_zh_tw_edition_and_links_to_it() -> None:
    english = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert CHAPTERS == english, f"chapters without a zh-TW edition: {sorted(set(english) - set(CHAPTERS))}"
    for chapter in CHAPTERS:
        notebook, _ = T["load"](chapter)
        assert T["with_twin_link"](notebook, chapter) == notebook, \
            f"notebooks/{chapter}.ipynb does not end its first cell with its zh-TW link: run scripts/translations.py build"


def test_the_twin_link_is_not_part_of_what_is_translated() -> None:
    linked = T["with_twin_link"](NOTEBOOK, "x")
    assert T["markdown_cells"](linked) == T["markdown_cells"](NOTEBOOK)
    assert T["with_twin_link"](linked, "x") == linked                     # once


def test_the_book_has_both_editions() -> None:
    import yaml
    toc = [entry["file"] for entry in yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())["chapters"]]
    assert [f for f in toc if f.startswith("notebooks/zh-TW/")] == [f"notebooks/zh-TW/{c}" for c in CHAPTERS]
