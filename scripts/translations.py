"""The zh-TW edition: one translation file per chapter, keyed by cell id, generated into notebooks that cannot drift.

The English notebooks are the source. ``translations/zh-TW/<chapter>.md`` holds a chapter's markdown cells in
Traditional Chinese, each block opened by a marker naming the English cell and the hash of the source it
translates::

    <!-- cell ch11-00 en:3f2a9c1be0d4 -->
    # 第 11 章 — 跨副本的前綴感知路由
    ...

``python scripts/translations.py build`` writes ``notebooks/zh-TW/<chapter>.ipynb`` for every chapter that has
a translation file: the English notebook with each markdown cell replaced by its translation, and every code cell
and output copied as it is (so the zh-TW notebooks need not be executed again: their code is the English code),
but for one change: the setup cell passes ``lang="zh-TW"``, so the graders speak Chinese to a zh-TW reader.
Relative links out of ``notebooks/`` gain one ``../``. ``python scripts/translations.py stub <chapter>`` writes a
file to translate, the English text under each marker. ``python scripts/translations.py check`` lists what is
missing, stale (the English cell changed after it was translated), or unfaithful (a number or an inline code span
that differs), the same checks ``tests/test_translations.py`` makes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LANG = "zh-TW"
TRANSLATIONS = ROOT / "translations" / LANG
NOTEBOOKS = ROOT / "notebooks"
OUT = NOTEBOOKS / LANG
MARKER = re.compile(r"^<!-- cell (?P<id>\S+) en:(?P<hash>[0-9a-f]{12}) -->$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`(?:[^`\n]|\n(?![ \t>]*\n))+`")   # may run over a line break, not over a blank line
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?")
FULL_WIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")
SETUP = "pagedkv_edu.setup(seed=0)"
ZH_SETUP = f'pagedkv_edu.setup(seed=0, lang="{LANG}")'
"""The one code change: the setup cell asks for the graders' zh-TW verdicts (the cell's output is unchanged)."""
LINK_UP = re.compile(r"(\]\(|src=\"|href=\")\.\./")
GLOSSARY = ROOT / "book" / "glossary.md"
LINK_TARGET = re.compile(r"\]\([^)]*\)")
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
LATIN = re.compile(r"[A-Za-z]")


def source_hash(source: str) -> str:
    """The first 12 hex digits of the SHA-256 of an English cell's source: what a translation records."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def cell_source(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def _chinese(paragraph: str) -> bool:
    cjk, latin = len(CJK.findall(paragraph)), len(LATIN.findall(paragraph))
    return cjk > 0 and cjk >= 0.2 * (cjk + latin)


def _paragraphs(text: str) -> list[str]:
    """Paragraphs end at a blank line, or at an empty line of a block quote (">"); a fenced code block is one."""
    fenced: list[str] = []
    masked = FENCE.sub(lambda m: fenced.append(m.group()) or f"\0{len(fenced) - 1}\0", text)
    parts = re.split(r"\n[ \t]*>?[ \t]*\n", masked)
    return [re.sub(r"\0(\d+)\0", lambda m: fenced[int(m[1])], p) for p in parts]


def english_part(text: str) -> str:
    """A cell without its paragraphs in Chinese. The English chapters already carry some Chinese: quotes of the
    articles (which the translation keeps) and zh-TW summaries (goals, recaps, which it replaces)."""
    return "\n\n".join(p for p in _paragraphs(text) if not _chinese(p))


def chinese_part(text: str) -> str:
    """The cell's paragraphs in Chinese: what a translation may keep as they are."""
    return "\n\n".join(p for p in _paragraphs(text) if _chinese(p))


TWIN_LINK = re.compile(r"\n*^\[繁體中文版 Traditional Chinese\]\(zh-TW/[^)]+\)[ \t]*$", re.M)


def twin_link(chapter: str) -> str:
    """The line an English chapter's first cell ends with: the link to its zh-TW twin (left out of the hash)."""
    return f"[繁體中文版 Traditional Chinese](zh-TW/{chapter}.ipynb)"


def english_source(cell: dict[str, Any]) -> str:
    """An English markdown cell's source without the twin link: what a translation translates and records."""
    return TWIN_LINK.sub("", cell_source(cell))


def markdown_cells(notebook: dict[str, Any]) -> list[tuple[str, str]]:
    """The notebook's markdown cells that hold English, as (id, source), in order. A cell written wholly in
    Chinese (a chapter's zh-TW key argument) is the same in both editions and needs no translation."""
    return [(c["id"], english_source(c)) for c in notebook["cells"]
            if c["cell_type"] == "markdown" and english_part(english_source(c)).strip()]


def with_twin_link(notebook: dict[str, Any], chapter: str) -> dict[str, Any]:
    """The English notebook with its first markdown cell ending in the link to the zh-TW edition (once)."""
    out = copy.deepcopy(notebook)
    first = next(c for c in out["cells"] if c["cell_type"] == "markdown")
    first["source"] = (english_source(first).rstrip("\n") + "\n\n" + twin_link(chapter)).splitlines(keepends=True)
    return out


def parse(text: str, name: str = "translation") -> dict[str, tuple[str, str]]:
    """A translation file's blocks: cell id -> (the English hash it was made from, the zh-TW text)."""
    marks = list(MARKER.finditer(text))
    if text[:marks[0].start()].strip() if marks else text.strip():
        raise ValueError(f"{name}: text before the first '<!-- cell ID en:HASH -->' marker")
    blocks: dict[str, tuple[str, str]] = {}
    for m, end in zip(marks, [*(n.start() for n in marks[1:]), len(text)]):
        if m["id"] in blocks:
            raise ValueError(f"{name}: cell {m['id']} is translated twice")
        blocks[m["id"]] = (m["hash"], text[m.end():end].strip("\n"))
    return blocks


def stub(notebook: dict[str, Any]) -> str:
    """A file to translate: every markdown cell's marker, with the English text to replace under it."""
    return "\n\n".join(f"<!-- cell {cid} en:{source_hash(src)} -->\n{english_part(src)}"
                         for cid, src in markdown_cells(notebook)) + "\n"


def fidelity_tokens(text: str) -> Counter[str]:
    """What a translation must keep exactly: every inline code span, and every number written in digits outside
    them (thousands separators dropped, full-width digits read as digits; a full-width comma separates numbers)."""
    text = text.translate(FULL_WIDTH_DIGITS)     # not NFKC: it would make "0.8.0，2025" one number, "0,2025"
    fences = FENCE.findall(text)
    text = FENCE.sub(" ", text)
    spans = CODE_SPAN.findall(text)
    rest = CODE_SPAN.sub(" ", text)
    return Counter(fences) + Counter(spans) + Counter(n.replace(",", "") for n in NUMBER.findall(rest))


def glossary_terms(path: Path = GLOSSARY) -> list[tuple[str, str]]:
    """The book's glossary as (English term, zh-TW term) pairs, parentheses dropped: "time to first token (TTFT)"
    is "time to first token", "PagedAttention（原文不譯）" is "PagedAttention"."""
    block = path.read_text(encoding="utf-8").split("```{glossary}", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    pairs = []
    for first, second in zip(lines, lines[1:]):
        if first and second and not first.startswith((" ", ":")) and not second.startswith(" "):
            pairs.append((re.sub(r"\s*\(.*?\)", "", first).strip(), re.sub(r"（.*?）", "", second).strip()))
    return pairs


def _prose(text: str) -> str:
    """Text without inline code and link targets: what a term check reads."""
    return LINK_TARGET.sub("]", CODE_SPAN.sub(" ", text))


def term_problems(english: str, translated: str, terms: list[tuple[str, str]]) -> list[str]:
    """Glossary terms the English cell uses whose one zh-TW rendering the translation does not use."""
    prose_en, prose_zh = _prose(english), re.sub(r"\s+", "", _prose(translated))
    bare_zh = re.sub(r"（[^）]*）", "", prose_zh)      # "LRU（最近最少使用）逐出" is the term "LRU逐出" glossed
    missing = []
    for en, zh in terms:     # spaces between Chinese and Latin vary ("CSR 分頁表"), so the zh side ignores them
        zh = re.sub(r"\s+", "", zh)
        if re.search(rf"(?<![\w-]){re.escape(en)}(?:s|es)?(?![\w-])", prose_en, re.I) and \
                zh not in prose_zh and zh not in bare_zh:
            missing.append(f"{en} -> {zh}")
    return missing


def problems(notebook: dict[str, Any], translations: dict[str, tuple[str, str]],
             terms: list[tuple[str, str]] | None = None) -> list[str]:
    """Everything wrong with a chapter's translation, one line each (empty when it is whole, fresh and faithful)."""
    english = dict(markdown_cells(notebook))
    terms = glossary_terms() if terms is None else terms      # read once, not once a cell
    found = [f"cell {cid}: no translation" for cid in english if cid not in translations]
    found += [f"cell {cid}: translated, but the English notebook has no markdown cell {cid}"
              for cid in translations if cid not in english]
    for cid, (made_from, text) in translations.items():
        if cid not in english:
            continue
        if made_from != source_hash(english[cid]):
            found.append(f"cell {cid}: stale, the English cell changed since it was translated "
                         f"(translated {made_from}, now {source_hash(english[cid])})")
        if not text.strip():
            found.append(f"cell {cid}: the translation is empty")
        # Every number and code span of the English, none it lacks, except those of a Chinese paragraph kept as it is
        want, got = fidelity_tokens(english_part(english[cid])), fidelity_tokens(text)
        lost = want - got
        added = (got - want) - fidelity_tokens(chinese_part(english[cid]))
        if lost or added:
            found.append(f"cell {cid}: numbers or inline code differ: missing {sorted(lost.elements())}, "
                         f"extra {sorted(added.elements())}")
        unused = term_problems(english_part(english[cid]), text, terms)
        if unused:
            found.append(f"cell {cid}: the glossary's terms are not used: {', '.join(unused)}")
    return found


CHAPTER_LINK = re.compile(r"(\]\()(\d\d[a-z]?_\w+)(\.ipynb)")


def localise_links(text: str, translated: set[str]) -> str:
    """Links out of ``notebooks/`` (``../book/...``) gain a ``../``: the zh-TW notebooks sit one folder deeper.
    A link to a chapter not in ``translated`` (no zh-TW edition yet) goes to the English one."""
    text = LINK_UP.sub(lambda m: f"{m[1]}../../", text)
    return CHAPTER_LINK.sub(lambda m: m[0] if m[2] in translated else f"{m[1]}../{m[2]}{m[3]}", text)


def generate(notebook: dict[str, Any], translations: dict[str, tuple[str, str]], chapter: str) -> dict[str, Any]:
    """The zh-TW notebook: markdown cells translated, code cells and their outputs exactly the English ones."""
    bad = problems(notebook, translations)
    if bad:
        raise ValueError(f"{chapter}: the translation is not ready:\n" + "\n".join(bad))
    out = copy.deepcopy(notebook)
    translated = set(chapters())                             # which links can stay in the zh-TW edition
    first = True
    for cell in out["cells"]:
        if cell["cell_type"] == "markdown":
            text = translations[cell["id"]][1] if cell["id"] in translations else english_source(cell)  # all Chinese
            text = localise_links(text, translated)
            if first:       # the page's twin: the English chapter it is generated from, one folder up
                text += f"\n\n[English edition 英文版](../{chapter}.ipynb) · 本頁由英文版逐格翻譯而成，程式碼與輸出與英文版相同。"
                first = False
            cell["source"] = text.splitlines(keepends=True)
        elif SETUP in cell_source(cell):
            cell["source"] = cell_source(cell).replace(SETUP, ZH_SETUP).splitlines(keepends=True)
    out["metadata"]["pagedkv_edu"] = {"edition": LANG, "source": f"notebooks/{chapter}.ipynb",
                                      "generated_by": "scripts/translations.py build"}
    return out


def dumps(notebook: dict[str, Any]) -> str:
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def chapters() -> list[str]:
    """Chapters with a translation file, in order."""
    return sorted(p.stem for p in TRANSLATIONS.glob("*.md"))


def load(chapter: str) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    notebook = json.loads((NOTEBOOKS / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    path = TRANSLATIONS / f"{chapter}.md"
    return notebook, parse(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "stub" and len(argv) == 2:
        notebook = json.loads((NOTEBOOKS / f"{argv[1]}.ipynb").read_text(encoding="utf-8"))
        path = TRANSLATIONS / f"{argv[1]}.md"
        if path.exists():
            print(f"{path} exists; not overwritten", file=sys.stderr)
            return 1
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stub(notebook), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if command not in ("build", "check"):
        print("usage: python scripts/translations.py [check | build | stub CHAPTER]", file=sys.stderr)
        return 2
    failed = False
    for chapter in chapters():
        notebook, translations = load(chapter)
        bad = problems(notebook, translations)
        for line in bad:
            print(f"{chapter}: {line}")
        failed |= bool(bad)
        if command == "build" and not bad:
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"{chapter}.ipynb").write_text(dumps(generate(notebook, translations, chapter)), encoding="utf-8")
            print(f"wrote notebooks/{LANG}/{chapter}.ipynb")
            linked = with_twin_link(notebook, chapter)
            if linked != notebook:       # the English page links to its twin
                (NOTEBOOKS / f"{chapter}.ipynb").write_text(dumps(linked), encoding="utf-8")
                print(f"linked notebooks/{chapter}.ipynb to its zh-TW edition")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
