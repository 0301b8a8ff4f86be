"""Which language the book speaks to its reader: English, or Traditional Chinese (Taiwan).

``pagedkv_edu.setup(lang="zh-TW")`` (the zh-TW notebooks' setup cell) or ``PAGEDKV_LANG=zh-TW`` picks it;
English is the default. Graders, widgets and figures write English templates through :func:`tr`, and the
English template is the key of its translation, as gettext keys a catalogue by its English ``msgid``. A
catalogue is a package with one module per source module, each a ``MESSAGES`` dict (English template ->
translation, the same ``{fields}``): :mod:`pagedkv_edu.viz.zh_tw` for the pictures and widgets, and the
graders' own, which :mod:`pagedkv_edu.exercises.messages` adds (the graders sit above the views, so the views
do not name them).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from functools import cache
from typing import Any

LANGUAGES: tuple[str, ...] = ("en", "zh-TW")
LANG_VAR = "PAGEDKV_LANG"
CATALOGUE_PACKAGES: dict[str, str] = {"zh-TW": "zh_tw"}    # language -> the name of its catalogue packages
_PACKAGES: list[str] = [__package__]                      # where catalogues live: the views', and what is added


def _checked(lang: str) -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


_language = _checked(os.environ.get(LANG_VAR) or "en")


def set_language(lang: str) -> None:
    """The language the graders, widgets and figures speak from now on in this process."""
    global _language
    _language = _checked(lang)


def language() -> str:
    return _language


class Message(str):
    """A line for the reader: a ``str`` whose value is the English text, printed in the reader's language.

    It is a ``str`` so that graders and tests compare, measure and store it as one. ``str()``, ``print`` and
    f-strings render it in the language set *when they run*, not when it was made: a hidden case's name is
    made when its grader module is imported, before the zh-TW setup cell picks the language. ``+`` and
    ``join`` see the English value, so lines are composed with f-strings or fields, never with those.
    """

    template: str
    fields: dict[str, Any]

    def __new__(cls, template: str, /, **fields: Any) -> "Message":
        english = template.format(**{k: v.render("en") if isinstance(v, Message) else v for k, v in fields.items()})
        self = super().__new__(cls, english)      # English whatever the language now: it is the value, and a key
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
    """A line written in English, ``{fields}`` and all, that prints in the reader's language."""
    return Message(template, **fields)


def catalogue_package(lang: str) -> str:
    """The name of ``lang``'s catalogue package inside each package that has one (``zh_tw`` for zh-TW)."""
    return CATALOGUE_PACKAGES[_checked(lang)]


def add_catalogue(package: str) -> None:
    """Read translations from ``package``'s catalogues (``package.zh_tw``) too: how a layer above adds its own."""
    if package not in _PACKAGES:
        _PACKAGES.append(package)
        catalogue.cache_clear()


@cache
def catalogue(lang: str) -> dict[str, str]:
    """Every translated template of ``lang``: English template -> translation, from every added package."""
    if _checked(lang) == "en":
        return {}
    merged: dict[str, str] = {}
    for owner in _PACKAGES:
        name = f"{owner}.{catalogue_package(lang)}"
        package = importlib.import_module(name)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            module = f"{name}.{info.name}"
            for english, translated in importlib.import_module(module).MESSAGES.items():
                if merged.setdefault(english, translated) != translated:
                    raise ValueError(f"{module}: {english!r} is translated two ways: "
                                     f"{merged[english]!r}, {translated!r}")
    return merged
