"""Where production engines implement each idea of the book (chapter 10).

The rows live in ``pagedkv_edu/data/production_map.json``; each names a repository, a file, a
symbol and the 40-hex commit that was read, and is a claim about that commit only, in our words.
The book side of each concept is a dotted path into ``pagedkv_edu`` (:func:`resolve`).
"""

from __future__ import annotations

import html
import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent.parent / "data" / "production_map.json"
"""The committed rows: concepts, implementations, and what was not verified."""

REPOSITORIES: dict[str, str] = json.loads(DATA.read_text())["repositories"]
"""The projects the chapter compares, and the GitHub repository of each."""

PROJECTS: tuple[str, ...] = tuple(REPOSITORIES)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Concept:
    """One idea of the book and the ``pagedkv_edu`` object that implements it (if any yet)."""

    key: str
    title: str
    chapter: str  # "2", or "6 (planned)" while the chapter's module is not written
    book_symbol: str | None  # "pagedkv_edu.module:Attr.attr"; None while planned

    def __post_init__(self) -> None:
        if self.book_symbol is None and not ("planned" in self.chapter or "not in the book" in self.chapter):
            raise ValueError(f"concept {self.key!r} has no book symbol but its chapter {self.chapter!r} "
                             "says neither 'planned' nor 'not in the book'")
        if self.book_symbol is not None and not self.book_symbol.startswith("pagedkv_edu"):
            raise ValueError(f"book symbol {self.book_symbol!r} of {self.key!r} is outside pagedkv_edu")


@dataclass(frozen=True)
class Implementation:
    """Where one project implements (or does differently) one concept, at one commit."""

    concept: str
    project: str
    repo: str
    path: str
    symbol: str
    commit: str
    note: str

    def __post_init__(self) -> None:
        if self.project not in REPOSITORIES:
            raise ValueError(f"unknown project {self.project!r}; choose one of {', '.join(PROJECTS)}")
        if self.repo != REPOSITORIES[self.project]:
            raise ValueError(f"{self.project} lives in {REPOSITORIES[self.project]}, not {self.repo!r}")
        if not _COMMIT.match(self.commit):
            raise ValueError(f"commit {self.commit!r} of {self.project} {self.path} is not 40 lowercase hex digits")
        for name in ("path", "symbol", "note"):
            if not getattr(self, name).strip():
                raise ValueError(f"{self.project} row for {self.concept!r} has an empty {name}")

    @property
    def url(self) -> str:
        """A permalink to the file at the commit that was read."""
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}"


@dataclass(frozen=True)
class ProductionMap:
    """Everything the data file holds, checked."""

    concepts: tuple[Concept, ...]
    implementations: tuple[Implementation, ...]
    not_verified: tuple[str, ...]


def load(path: str | Path = DATA) -> ProductionMap:
    """Read and check a production map: every row's project, repository and commit, and that one
    file of one project is always cited at one commit (a row cannot cite another version)."""
    data = json.loads(Path(path).read_text())
    concepts = tuple(Concept(**c) for c in data["concepts"])
    keys = {c.key for c in concepts}
    rows = tuple(Implementation(repo=data["repositories"].get(r["project"], "?"), **r) for r in data["implementations"])
    commits: dict[tuple[str, str], str] = {}
    for r in rows:
        if r.concept not in keys:
            raise ValueError(f"{r.project} row {r.path} names no known concept: {r.concept!r}")
        if commits.setdefault((r.project, r.path), r.commit) != r.commit:
            raise ValueError(f"{r.project} {r.path} is cited at two commits: {commits[r.project, r.path]} and {r.commit}")
    return ProductionMap(concepts, rows, tuple(data["not_verified"]))


_MAP = load()
CONCEPTS: tuple[Concept, ...] = _MAP.concepts
IMPLEMENTATIONS: tuple[Implementation, ...] = _MAP.implementations
NOT_VERIFIED: tuple[str, ...] = _MAP.not_verified
"""Claims the chapter does not make because the source was not read."""


def concept(key: str) -> Concept:
    """The concept called ``key``."""
    for c in CONCEPTS:
        if c.key == key:
            return c
    raise KeyError(f"no concept {key!r}; choose one of {', '.join(c.key for c in CONCEPTS)}")


def rows_for(key: str) -> tuple[Implementation, ...]:
    """Every implementation row of concept ``key``, in table order."""
    concept(key)
    return tuple(r for r in IMPLEMENTATIONS if r.concept == key)


def resolve(book_symbol: str) -> Any:
    """Import ``"package.module:Attr.attr"`` and return the object it names."""
    module_name, _, attrs = book_symbol.partition(":")
    if not module_name or not attrs:
        raise ValueError(f"book symbol {book_symbol!r} is not of the form 'module:attribute'")
    obj: Any = importlib.import_module(module_name)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


def coverage() -> dict[str, dict[str, int]]:
    """Rows per concept and project: which project shows each idea, and how often."""
    return {c.key: {p: sum(r.project == p for r in rows_for(c.key)) for p in PROJECTS} for c in CONCEPTS}


def html_table(key: str) -> str:
    """Concept ``key``'s rows as an HTML table with permalinks (notebook outputs and the rendered book)."""
    def cell(text: str) -> str:
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))

    head = "".join(f"<th>{h}</th>" for h in ("project", "file", "symbol", "commit", "what it does"))
    body = "".join(
        f'<tr><td>{r.project}</td><td><a href="{html.escape(r.url)}"><code>{html.escape(r.path)}</code></a></td>'
        f"<td><code>{html.escape(r.symbol)}</code></td><td><code>{r.commit[:10]}</code></td><td>{cell(r.note)}</td></tr>"
        for r in rows_for(key))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

