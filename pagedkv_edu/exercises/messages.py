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

import importlib
import os
import pkgutil
import string
from functools import cache
from typing import Any

LANGUAGES: tuple[str, ...] = ("en", "zh-TW")
LANG_VAR = "PAGEDKV_LANG"

MESSAGES: dict[str, dict[str, str]] = {
    "not_solved": {
        "en": "○ {name}: not solved yet ({why}). Write your version above and run the cell again.",
        "zh-TW": "○ {name}：尚未解答（{why}）。請在上方寫下你的版本，再執行一次這個儲存格。",
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
    "prediction_off": {
        "en": "✗ {name}（{zh}）: you predicted {predicted}{unit}; measured {measured}{unit}",
        "zh-TW": "✗ {zh}（{name}）：你預測 {predicted}{unit}；量測結果 {measured}{unit}",
    },
}


def _checked(lang: str) -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


_language = _checked(os.environ.get(LANG_VAR) or "en")


def set_language(lang: str) -> None:
    """The language every grader speaks from now on in this process."""
    global _language
    _language = _checked(lang)


def language() -> str:
    return _language


class Message(str):
    """A grader's line: a ``str`` whose value is the English text, printed in the reader's language.

    It is a ``str`` so that graders and tests compare, measure and store it as one. ``str()``, ``print`` and
    f-strings render it in the language set *when they run*, not when it was made: a hidden case's name is
    made when its grader module is imported, before the zh-TW setup cell picks the language. ``+`` and
    ``join`` see the English value, so graders compose lines with f-strings or fields, never with those.
    """

    template: str
    fields: dict[str, Any]

    def __new__(cls, template: str, /, **fields: Any) -> "Message":
        self = super().__new__(cls, template.format(**fields))
        self.template, self.fields = template, fields
        return self

    def render(self, lang: str) -> str:
        """The text in ``lang``; fields that are messages themselves are rendered in the same language."""
        if lang == "en":
            return str.__str__(self)
        translated = catalogue(lang).get(self.template)
        if translated is None:      # tests keep this from happening; English beats a KeyError in a notebook
            return str.__str__(self)
        return translated.format(**{k: v.render(lang) if isinstance(v, Message) else v
                                    for k, v in self.fields.items()})

    def __str__(self) -> str:
        return self.render(_language)

    def __format__(self, spec: str) -> str:
        return format(self.render(_language), spec)


def tr(template: str, /, **fields: Any) -> Message:
    """A failure line written in English, ``{fields}`` and all, that prints in the reader's language."""
    return Message(template, **fields)


@cache
def catalogue(lang: str) -> dict[str, str]:
    """Every translated template of ``lang``: English template -> translation, from the modules of :mod:`.zh_tw`."""
    if _checked(lang) == "en":
        return {}
    package = importlib.import_module(f"{__package__}.zh_tw")
    merged: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        for english, translated in importlib.import_module(f"{package.__name__}.{info.name}").MESSAGES.items():
            if merged.setdefault(english, translated) != translated:
                raise ValueError(f"{info.name}: {english!r} is translated two ways: {merged[english]!r}, {translated!r}")
    return merged


def say(key: str, **fields: object) -> str:
    """The verdict ``key`` in the current language, its ``{fields}`` filled in."""
    return MESSAGES[key][_language].format(**fields)


def fields_of(template: str) -> set[str]:
    """The ``{names}`` a template needs: the same in every language (tested)."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}
