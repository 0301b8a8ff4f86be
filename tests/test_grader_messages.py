"""Every line a grader or a widget writes has its zh-TW translation, and no English sentence escapes the catalogue.

The graders and the widgets write English templates through ``tr(...)`` (:mod:`pagedkv_edu.viz.language`); the
translations are in :mod:`pagedkv_edu.exercises.zh_tw` and :mod:`pagedkv_edu.viz.zh_tw`. Read statically,
from the source:

- every ``tr`` call's template is a literal, and has a translation; every translation is used;
- a translation has the template's fields (names and conversions), numbers and inline code, and renders each
  glossary term the template uses by its one zh-TW term (the notebooks' translation check, reused);
- no other string literal in a grader or view module reads as English prose (two words or more), apart from
  docstrings, exceptions raised for a programming error, a figure's text (translated when the figure is shown:
  tests/test_figure_text.py) and a line marked ``# en: not shown to readers``.
"""

from __future__ import annotations

import ast
import re
import runpy
import string
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pagedkv_edu.exercises import messages

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import translations  # noqa: E402  (scripts/ is not a package)

EXERCISES = ROOT / "pagedkv_edu" / "exercises"
VIZ = ROOT / "pagedkv_edu" / "viz"
GRADERS = sorted(p for p in EXERCISES.glob("*.py") if p.name not in {"messages.py"}) + \
    sorted(p for p in VIZ.glob("*.py") if p.name not in {"language.py", "figure_text.py"}) + \
    [ROOT / "pagedkv_edu" / "engine" / "guards.py"]    # the engine's checks on a reader's part, handed tr
PROSE = re.compile(r"[A-Za-z]{2,}[ ,;:']+[A-Za-z]{2,}")
EXEMPT = "# en: not shown to readers"
ENGLISH_ONLY_FIELDS = {"s", "es", "plural"}     # "{n} token{s}": Chinese has no plural to fill in
LAYOUT_KEYWORDS = {"loc", "ha", "va", "horizontalalignment", "verticalalignment", "family", "fontfamily"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _is_tr(node: ast.AST) -> bool:
    """``tr(...)``, or ``self.tr(...)`` (a part handed its translator: the engine's guards)."""
    return isinstance(node, ast.Call) and (isinstance(node.func, ast.Name) and node.func.id == "tr"
                                           or isinstance(node.func, ast.Attribute) and node.func.attr == "tr")


def templates(path: Path) -> Iterator[tuple[int, str | None]]:
    """(line, template) of every ``tr`` call in ``path``; template None when it is not one literal string."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if _is_tr(node):
            arg = node.args[0] if node.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            yield node.lineno, arg.value if literal else None


def untranslated_prose(path: Path) -> list[str]:
    """String literals in ``path`` that read as English and do not go through ``tr``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if _is_tr(node) and node.args:
            skip.add(id(node.args[0]))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):   # an attribute's docstring
            skip.add(id(node.value))
        if isinstance(node, (ast.Raise, ast.Assert)):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
        if isinstance(node, ast.keyword) and node.arg in LAYOUT_KEYWORDS:     # loc="upper left": matplotlib's words
            skip.add(id(node.value))
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or EXEMPT in lines[node.lineno - 1] if hasattr(node, "lineno") else True:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):     # its values as X1, X2, ...: what a figure's template matches
            count = iter(range(1, len(node.values) + 1))
            text = "".join(v.value if isinstance(v, ast.Constant) else f"X{next(count)}" for v in node.values)
        else:
            continue
        if PROSE.search(translations.CODE_SPAN.sub(" ", text)) and not _figure_text(text):
            found.append(f"{path.name}:{node.lineno}: {text[:70]!r}")
    return found


def _figure_text(text: str) -> bool:
    """A text a figure draws, which the figures' catalogue translates as the figure is shown."""
    from pagedkv_edu.viz.figure_text import translate

    return translate(text, "zh-TW") != text


def _fields(template: str) -> list[tuple[str, str | None, str]]:
    return sorted((name, conversion, spec or "") for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None)


CATALOGUES = sorted(p for folder in (EXERCISES / "zh_tw", VIZ / "zh_tw")
                    for p in folder.glob("*.py") if p.name != "__init__.py")
FIGURES = VIZ / "zh_tw" / "figures.py"    # keyed by drawn text: tests/test_figure_text.py


def _catalogue_of(path: Path) -> dict[str, str]:
    return runpy.run_path(str(path))["MESSAGES"]


@pytest.mark.parametrize("path", GRADERS, ids=lambda p: p.name)
def test_every_template_is_a_literal_with_a_translation(path: Path) -> None:
    catalogue = messages.catalogue("zh-TW")
    problems = []
    for line, template in templates(path):
        if template is None:
            problems.append(f"{path.name}:{line}: tr's template must be one literal string")
        elif template not in catalogue:
            problems.append(f"{path.name}:{line}: no zh-TW translation of {template!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", [p for p in CATALOGUES if p != FIGURES], ids=lambda p: f"zh_tw/{p.name}")
def test_every_translation_is_used(path: Path) -> None:
    used = {template for grader in GRADERS for _, template in templates(grader)}
    assert sorted(set(_catalogue_of(path)) - used) == []


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: f"{p.parent.parent.name}/zh_tw/{p.name}")
def test_translations_keep_fields_numbers_code_and_glossary_terms(path: Path) -> None:
    terms = translations.glossary_terms()
    problems = []
    for english, zh in _catalogue_of(path).items():
        dropped = {f for f in _fields(english) if f not in _fields(zh) and f[0] in ENGLISH_ONLY_FIELDS}
        if set(_fields(english)) - dropped != set(_fields(zh)):
            problems.append(f"{english!r}: fields {_fields(english)} != {_fields(zh)}")
        bare_en, bare_zh = (re.sub(r"\{[^{}]*\}", " ", t) for t in (english, zh))
        if translations.fidelity_tokens(bare_en) != translations.fidelity_tokens(bare_zh):
            problems.append(f"{english!r}: numbers or inline code differ in {zh!r}")
        if re.search(r"[A-Za-z]{2,}", translations.CODE_SPAN.sub(" ", bare_en)) and not translations.CJK.search(zh):
            problems.append(f"{english!r}: {zh!r} has no Chinese")
        problems += [f"{english!r}: {term}" for term in translations.term_problems(bare_en, bare_zh, terms)]
    assert not problems, "\n".join(problems)


def test_the_catalogues_agree_where_they_share_a_template() -> None:
    messages.catalogue.cache_clear()
    assert messages.catalogue("zh-TW")     # raises on a template translated two ways


@pytest.mark.parametrize("path", GRADERS, ids=lambda p: p.name)
def test_no_english_prose_outside_tr(path: Path) -> None:
    assert untranslated_prose(path) == []


def test_a_message_renders_when_printed_not_when_made(capsys: pytest.CaptureFixture[str]) -> None:
    line = messages.tr("hidden case {n}", n=3)           # made in English, as at import time
    assert line == "hidden case 3" and isinstance(line, str)
    messages.set_language("zh-TW")
    try:
        print(line, f"[{line}]", messages.tr("also wrong: {cases}", cases=line))
    finally:
        messages.set_language("en")
    assert capsys.readouterr().out == "隱藏案例 3 [隱藏案例 3] 同樣錯誤的還有：隱藏案例 3\n"
    assert str(line) == "hidden case 3"


def test_a_message_made_in_zh_tw_keeps_its_english_value() -> None:
    messages.set_language("zh-TW")
    try:
        line = messages.tr("also wrong: {cases}", cases=messages.tr("hidden case {n}", n=3))
        assert line == "also wrong: hidden case 3" and str(line) == "同樣錯誤的還有：隱藏案例 3"
    finally:
        messages.set_language("en")
