"""Figures speak the reader's language where a CJK font is present: every English text the chapters and the
package put on a figure has its zh-TW translation, and a translated figure draws without a missing glyph.

The inventory is read from the source: the notebooks' code cells and the package's plotting modules, every
literal (or f-string) given to a title, an axis label, a legend entry, a tick label or a note.
"""

from __future__ import annotations

import ast
import io
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from pagedkv_edu.viz import figure_text
from pagedkv_edu.viz.language import set_language
from tests.zh_output import CJK

ROOT = Path(__file__).resolve().parents[1]
TEXT_METHODS = {"set_title": 0, "set_xlabel": 0, "set_ylabel": 0, "suptitle": 0, "supxlabel": 0, "supylabel": 0,
                "annotate": 0, "text": 2, "set_xticklabels": 0, "set_yticklabels": 0, "figtext": 2}
TEXT_KEYWORDS = {"label", "title", "xlabel", "ylabel", "labels"}
LETTERS = re.compile(r"[A-Za-z]{2,}")
UNITS = re.compile(r"\b(?:KiB|MiB|GiB|GB|ms|bf16)\b")     # what stays as it is in Chinese too


def words(text: str) -> bool:
    """Whether ``text`` has words to translate (not only numbers, units and an f-string's values)."""
    return bool(LETTERS.search(UNITS.sub(" ", text)))


def _sources() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and not source.lstrip().startswith(("%%", "!")):
                yield f"{path.name} cell {i}", "\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!")))
    for path in sorted((ROOT / "pagedkv_edu").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "matplotlib" in text and "exercises" not in path.parts:
            yield str(path.relative_to(ROOT)), text


def _strings(node: ast.AST) -> Iterator[ast.AST]:
    if isinstance(node, (ast.List, ast.Tuple)):
        for item in node.elts:
            yield from _strings(item)
    elif isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node


def sample(node: ast.AST) -> str:
    """The text a literal puts on a figure; an f-string's values become X1, X2, ... (a template matches them)."""
    if isinstance(node, ast.Constant):
        return node.value
    out, n = [], 0
    for value in node.values:    # type: ignore[attr-defined]
        if isinstance(value, ast.Constant):
            out.append(value.value)
        else:
            n += 1
            out.append(f"X{n}")
    return "".join(out)


def figure_texts() -> list[tuple[str, int, str]]:
    """(where, line, text) of every literal text the chapters and the package put on a figure."""
    found = []
    for where, source in _sources():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            args: list[ast.AST] = []
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in TEXT_METHODS and len(node.args) > TEXT_METHODS[name]:
                args.append(node.args[TEXT_METHODS[name]])
            args += [k.value for k in node.keywords if k.arg in TEXT_KEYWORDS]
            for arg in args:
                for literal in _strings(arg):
                    text = sample(literal)
                    if words(text):
                        found.append((where, node.lineno, text))
    return found


def test_every_figure_text_has_a_translation() -> None:
    missing = sorted({f"{where}:{line}: {text!r}" for where, line, text in figure_texts()
                      if any(words(part) and figure_text.translate(part, "zh-TW") == part
                             for part in text.split("\n"))})
    assert not missing, "\n".join(missing)


def _literals() -> set[str]:
    out: set[str] = set()
    for _, source in _sources():
        out |= {sample(n) for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.JoinedStr) or isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return out


def test_every_figure_translation_is_used() -> None:
    """Each entry translates a text some figure draws: one of the inventory's, or a value the code writes (a
    policy, a legend dict's label, an f-string put into a title) that a figure shows through a variable."""
    from pagedkv_edu.viz.zh_tw.figures import MESSAGES

    drawn = {part for _, _, text in figure_texts() for part in text.split("\n")}
    literals = _literals()
    unused = []
    for english in MESSAGES:
        pattern = figure_text._pattern(english)
        if english not in literals and not any(pattern.fullmatch(text) for text in drawn | literals):
            unused.append(english)
    assert unused == []


def test_translate_matches_exact_texts_templates_and_their_values() -> None:
    assert figure_text.translate("engine step", "zh-TW") == "引擎步驟"
    assert figure_text.translate("paged end to end", "zh-TW") == "分頁式：端到端"        # the value translated too
    assert figure_text.translate("hash chain, ShareGPT", "zh-TW") == "雜湊鏈，ShareGPT"  # an unknown value kept
    assert figure_text.translate("engine step\nLatency", "zh-TW") == "引擎步驟\n延遲"
    assert figure_text.translate("no such label", "zh-TW") == "no such label"
    assert figure_text.translate("engine step", "en") == "engine step"


def _chapter_0_figure():   # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    from pagedkv_edu.specs import get_spec
    from pagedkv_edu.viz import plots

    fig, ax = plt.subplots()
    plots.kv_memory_vs_concurrency(get_spec("llama-3.2-1b"), ax=ax)
    return fig


@pytest.fixture
def zh_tw() -> Iterator[None]:
    set_language("zh-TW")
    try:
        yield
    finally:
        set_language("en")


@pytest.mark.usefixtures("zh_tw")
def test_a_package_figure_is_translated_and_draws_every_glyph() -> None:
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    if figure_text.cjk_font() is None:
        pytest.skip("no CJK font on this machine: figures stay English (tested below)")
    figure_text.use_cjk_font()
    fig = figure_text.localise(_chapter_0_figure())
    texts = [t.get_text() for t in fig.findobj(Text) if words(t.get_text())]
    assert texts and all(CJK.search(t) for t in texts), texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # "Glyph ... missing from font(s)" is a warning: a box
        fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)


@pytest.mark.usefixtures("zh_tw")
def test_without_a_cjk_font_figures_stay_english(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    monkeypatch.setattr(figure_text, "cjk_font", lambda: None)
    assert figure_text.figure_language() == "en"
    fig = figure_text.localise(_chapter_0_figure())
    assert fig.axes[0].get_xlabel() == "concurrent requests"
    plt.close(fig)


@pytest.mark.usefixtures("zh_tw")
def test_figures_shown_by_ipython_are_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell
    from matplotlib.figure import Figure

    monkeypatch.setattr(figure_text, "cjk_font", lambda: "Noto Sans CJK TC")   # the wrapping, not the font
    shell = InteractiveShell.instance()
    png = shell.display_formatter.formatters["image/png"]
    png.for_type(Figure, lambda figure: figure.axes[0].get_xlabel())   # a backend's formatter, reduced
    assert figure_text.localise_when_shown(shell) is True
    assert figure_text.localise_when_shown(shell) is True             # wraps once, not twice
    fig = _chapter_0_figure()
    assert png(fig) == "並行請求"
    plt.close(fig)
