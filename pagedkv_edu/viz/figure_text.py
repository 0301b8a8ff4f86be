"""A figure's text in the reader's language: the chapters write titles, axes, legends and notes in English;
shown in a zh-TW notebook on a machine with a CJK font, each is replaced by its translation as it is shown.

The notebooks' code is the same in both editions, so the translation happens at display time, keyed by the
English text: an exact entry of the figures' catalogue (:mod:`pagedkv_edu.viz.zh_tw.figures`), or a template with ``{fields}``
matched against the whole line (``"{policy} end to end"`` matches ``"paged end to end"``; the captured values
are translated too). Without a CJK font, figures stay English: Chinese would be drawn as boxes.
"""

from __future__ import annotations

import importlib
import re
import string
from functools import cache
from pathlib import Path
from typing import Any

from .language import catalogue_package, language

CJK_FAMILIES: tuple[str, ...] = ("Noto Sans CJK TC", "Noto Sans TC", "Source Han Sans TC", "PingFang TC",
                                 "Microsoft JhengHei", "Noto Sans CJK JP", "Noto Sans CJK SC")
"""Fonts with Traditional Chinese glyphs, preferred first (Debian's fonts-noto-cjk gives the first)."""
CJK_FILES = re.compile(r"NotoSansCJK|NotoSans.*TC|SourceHanSans|PingFang|msjh", re.I)


@cache
def cjk_font() -> str | None:
    """The family name of an installed CJK font matplotlib can use, or None.

    matplotlib caches its font list when it first runs, so a font installed later (by ``make lab``'s
    install step, say) is not in it: such files are added to this process's list."""
    from matplotlib import font_manager

    def known() -> str | None:
        names = {f.name for f in font_manager.fontManager.ttflist}
        return next((family for family in CJK_FAMILIES if family in names), None)

    if known() is None:
        for path in font_manager.findSystemFonts():
            if CJK_FILES.search(Path(path).name):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError):     # a file FreeType cannot read: the next one may do
                    continue
    return known()


def figure_language() -> str:
    """The language figures are drawn in: the reader's, unless it needs a font this machine lacks."""
    lang = language()
    return lang if lang == "en" or cjk_font() is not None else "en"


@cache
def figures_catalogue(lang: str) -> dict[str, str]:
    """The figures' translations (:mod:`.zh_tw.figures`): English text or template -> translation."""
    if lang == "en":
        return {}
    return importlib.import_module(f"{__package__}.{catalogue_package(lang)}.figures").MESSAGES


def _pattern(template: str) -> re.Pattern[str]:
    """The texts ``template`` formats to: each ``{name}`` a group (the same group again where it repeats)."""
    parts, seen = [], set()
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name is not None:
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
            seen.add(name)
    return re.compile("".join(parts), re.S)


@cache
def _templates(lang: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    with_fields = [(english, zh) for english, zh in figures_catalogue(lang).items() if _pattern(english).groups]
    with_fields.sort(key=lambda pair: -len(pair[0]))     # the most specific template first
    return tuple((_pattern(english), zh) for english, zh in with_fields)


def translate(text: str, lang: str | None = None) -> str:
    """``text`` (a figure's title, label, legend entry...) in ``lang`` (default: the figures' language),
    line by line; a line the catalogue does not know stays as it is (a number, a model's name)."""
    lang = figure_language() if lang is None else lang
    if lang == "en" or not text:
        return text
    return "\n".join(_translate_line(line, lang) for line in text.split("\n"))


def _translate_line(line: str, lang: str) -> str:
    exact = figures_catalogue(lang).get(line)
    if exact is not None:
        return exact
    for pattern, translated in _templates(lang):
        match = pattern.fullmatch(line)
        if match:
            return translated.format(**{k: _translate_line(v, lang) for k, v in match.groupdict().items()})
    return line


def localise(figure: Any, lang: str | None = None) -> Any:
    """Translate every text of a matplotlib ``figure`` in place (titles, axes, ticks, legends, notes); returns it.

    Running it twice changes nothing more: a translated text is no English template."""
    from matplotlib.text import Text

    lang = figure_language() if lang is None else lang
    if lang != "en":
        for artist in figure.findobj(Text):
            text = artist.get_text()
            translated = translate(text, lang)
            if translated != text:
                artist.set_text(translated)
    return figure


def use_cjk_font() -> None:
    """Draw each glyph the usual font lacks with the CJK font (matplotlib falls back along ``font.family``)."""
    import matplotlib

    font = cjk_font()
    families = list(matplotlib.rcParams["font.family"])
    if font is not None and font not in families:
        matplotlib.rcParams["font.family"] = families + [font]


def localise_when_shown(shell: Any) -> bool:
    """In a zh-TW kernel with a CJK font, translate every figure IPython shows, just before it is drawn.

    The inline backend registers its figure formatters when it loads, which happens at the first figure;
    loading it here, first, lets this wrap them instead of being replaced by them. Returns whether it did."""
    if figure_language() == "en":
        return False
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    plt.close(plt.figure())          # loads the backend, which registers its formatters
    use_cjk_font()
    for formatter in shell.display_formatter.formatters.values():
        try:
            show = formatter.lookup_by_type(Figure)
        except KeyError:
            continue
        if getattr(show, "localises", False):
            continue

        def localised(figure: Any, *args: Any, show: Any = show, **kwargs: Any) -> Any:
            return show(localise(figure), *args, **kwargs)

        localised.localises = True      # type: ignore[attr-defined]
        formatter.for_type(Figure, localised)
    return True
