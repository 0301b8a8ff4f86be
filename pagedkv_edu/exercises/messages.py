"""What the graders say, in the reader's language: English templates, and their zh-TW translations.

``pagedkv_edu.setup(lang="zh-TW")`` (the zh-TW notebooks' setup cell) or ``PAGEDKV_LANG=zh-TW`` picks the
language; English is the default. Two kinds of text:

- the verdicts every grader prints (passed, failed, not solved yet, a prediction's outcome), by key in
  :data:`MESSAGES`;
- a failure's own lines, which name the case and the value: each grader writes them in English as
  ``tr("got {got}, expected {expected}", got=..., expected=...)``, and the English template is the key of
  its translation in :mod:`.zh_tw` (one module per grader module, as gettext keys a catalogue by its
  English ``msgid``). Tests prove every template has a translation with the same fields, numbers and
  glossary terms, and that the graders write no English sentence outside ``tr``.
"""

from __future__ import annotations

import string

from ..viz.language import LANG_VAR, LANGUAGES, Message, add_catalogue, catalogue, language, set_language, tr

add_catalogue(__package__)

__all__ = ["LANG_VAR", "LANGUAGES", "MESSAGES", "Message", "catalogue", "fields_of", "language", "say",
           "set_language", "tr"]

MESSAGES: dict[str, dict[str, str]] = {
    "not_solved": {
        "en": "○ {name}: not solved yet ({why}). Write your version above and run the cell again.",
        "zh-TW": "○ {name}：尚未作答（{why}）。請在上方寫下你的版本，再執行一次這個儲存格。",
    },
    "passed": {"en": "✓ {name}: passed", "zh-TW": "✓ {name}：通過"},
    "passed_cases": {
        "en": "✓ {name}: passed ({shown} cases from the text and {hidden} hidden random ones)",
        "zh-TW": "✓ {name}：通過（內文的 {shown} 個案例，加上 {hidden} 個隱藏的隨機案例）",
    },
    "failed": {"en": "✗ {name}: failed", "zh-TW": "✗ {name}：未通過"},
    "no_prediction": {
        "en": "○ {name}（{zh}）: no prediction yet. Write your number above, then run the measurement.",
        "zh-TW": "○ {zh}（{name}）：還沒有預測。請在上方寫下你的數字，再執行量測。",
    },
    "not_a_number": {"en": "✗ {name}（{zh}）: {value} is not a number", "zh-TW": "✗ {zh}（{name}）：{value} 不是數字"},
    "prediction_close": {
        "en": "✓ {name}（{zh}）: you predicted {predicted}{unit}; measured {measured}{unit}",
        "zh-TW": "✓ {zh}（{name}）：你預測 {predicted}{unit}；量測結果 {measured}{unit}",
    },
    "prediction_why": {"en": "{verdict}. {why}", "zh-TW": "{verdict}。{why}"},
    "prediction_off": {
        "en": "✗ {name}（{zh}）: you predicted {predicted}{unit}; measured {measured}{unit}",
        "zh-TW": "✗ {zh}（{name}）：你預測 {predicted}{unit}；量測結果 {measured}{unit}",
    },
}


def say(key: str, **fields: object) -> str:
    """The verdict ``key`` in the current language, its ``{fields}`` filled in."""
    return MESSAGES[key][language()].format(**fields)


def fields_of(template: str) -> set[str]:
    """The ``{names}`` a template needs: the same in every language (tested)."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}
