"""The graders' verdicts in both languages: one catalogue, the same fields in each, picked by setup(lang=...)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

import pagedkv_edu
from pagedkv_edu.exercises import messages, report
from pagedkv_edu.exercises.predict import check_prediction


@pytest.fixture(autouse=True)
def english_after() -> Iterator[None]:
    yield
    messages.set_language("en")


def test_every_verdict_has_both_languages_with_the_same_fields() -> None:
    for key, by_lang in messages.MESSAGES.items():
        assert set(by_lang) == set(messages.LANGUAGES), key
        assert messages.fields_of(by_lang["en"]) == messages.fields_of(by_lang["zh-TW"]), key
        english_words = re.search(r"[A-Za-z]", re.sub(r"\{[^{}]*\}", "", by_lang["en"]))   # not "{verdict}. {why}"
        assert any("\u4e00" <= ch <= "\u9fff" for ch in by_lang["zh-TW"]) or not english_words, key


def test_setup_switches_the_graders_language(capsys: pytest.CaptureFixture[str]) -> None:
    assert report("check_x", [], shown=2, hidden=3) is True
    assert capsys.readouterr().out == "✓ check_x: passed (2 cases from the text and 3 hidden random ones)\n"
    pagedkv_edu.setup(seed=0, lang="zh-TW", self_test=False, quiet=True)
    assert report("check_x", ["case 1: wrong"]) is False
    assert capsys.readouterr().out == "✗ check_x：未通過\n  case 1: wrong\n"
    assert report("check_y", [], not_solved="it raises NotImplementedError") is False
    assert "尚未作答（it raises NotImplementedError）" in capsys.readouterr().out
    assert check_prediction("free blocks", "空閒區塊", 10, 12) is False
    assert capsys.readouterr().out == "✗ 空閒區塊（free blocks）：你預測 10；量測結果 12\n"


def test_an_unknown_language_is_refused_and_nothing_changes() -> None:
    with pytest.raises(ValueError, match="lang must be one of en, zh-TW, got 'fr'"):
        pagedkv_edu.setup(seed=0, lang="fr", self_test=False, quiet=True)
    assert messages.language() == "en"


def test_every_notebook_reason_has_its_zh_tw_twin() -> None:
    """A prediction's ``why`` is written in a notebook's code, which both editions share: each has ``why_zh``,
    with the same numbers."""
    import ast
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    import translations

    calls = 0
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code" or "check_prediction(" not in "".join(cell["source"]):
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check_prediction":
                    given = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
                    if "why" in given:
                        calls += 1
                        assert "why_zh" in given, f"{path.name}: {given['why']!r} has no why_zh"
                        assert translations.fidelity_tokens(given["why"]) == translations.fidelity_tokens(given["why_zh"])
    assert calls >= 7


def test_a_missed_prediction_explains_itself_in_the_readers_language(capsys: pytest.CaptureFixture[str]) -> None:
    check_prediction("free blocks", "空閒區塊", 10, 12, why="Two are held.", why_zh="有兩個被佔用。")
    assert capsys.readouterr().out.endswith("measured 12. Two are held.\n")
    messages.set_language("zh-TW")
    check_prediction("free blocks", "空閒區塊", 10, 12, why="Two are held.", why_zh="有兩個被佔用。")
    assert capsys.readouterr().out == "✗ 空閒區塊（free blocks）：你預測 10；量測結果 12。有兩個被佔用。\n"
