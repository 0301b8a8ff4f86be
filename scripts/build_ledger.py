"""Render the claims ledger (book/ledger.md) from its data file (book/ledger.yml).

Run from the repository root: ``python scripts/build_ledger.py``. tests/test_ledger.py fails when
the page is out of date, when a quote is not verbatim, when a number in the articles has no entry,
when an entry's evidence is missing from the notebook or record it names, or when a number of its
measured value or Chinese verdict is in none of the files it cites (`in`, `also_in`) nor in its quote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "book" / "ledger.yml"
PAGE = ROOT / "book" / "ledger.md"
VERDICTS = ("reproduced", "partly", "differs", "not measurable here")
MARK = {"reproduced": "✓ reproduced", "partly": "◐ partly reproduced", "differs": "≠ differs",
        "not measurable here": "∅ not measurable here"}


def load() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def _link(path: str) -> str:
    if path.startswith("notebooks/"):
        return f"[{Path(path).stem}](../{path.removesuffix('.ipynb')})"
    return f"`{path}`"


def _links(c: dict) -> str:
    """The files an entry cites: `in` (which holds its evidence), then any `also_in`."""
    paths = [p for p in (c.get("in"), *c.get("also_in", [])) if p]
    return f" ({', '.join(_link(p) for p in paths)})" if paths else ""


def _section(c: dict, level: str, said: list[str]) -> list[str]:
    """One claim's section: its anchor and heading, what was said, then where, measured and the verdicts."""
    return [
        f"({c['id']})=",
        f"{level} {c['id']}: {MARK[c['verdict']]}",
        "",
        *said,
        "",
        f"- **Where:** {c['where']}{_links(c)}",
        f"- **Measured:** {c['measured']}",
        f"- **Verdict:** {c['verdict']}" + (f". {c['why']}" if c.get("why") else ""),
        f"- **判定：** {c['zh']}",
        "",
    ]


def render(data: dict) -> str:
    """The ledger page: a summary table, then one section per claim, then the sentences that are not claims."""
    names = {key: a["called"] for key, a in data["articles"].items()}
    claims = data["claims"]
    counts = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    out = [
        "# Appendix: the claims ledger · 附錄：主張對照表",
        "",
        "Every number and checkable claim of the two articles the book follows (see the",
        "[references](references.md)), quoted in the original Traditional Chinese with an English gloss,",
        "where the book reproduces it, what it measures, and a verdict. A test checks that every sentence",
        "of the articles that contains a number (in digits or in Chinese numerals) has an entry here, that",
        "each quote is verbatim, and that every number of an entry's measured value and of its Chinese verdict",
        "appears in the committed output it cites (or in the quote it answers). This page is generated from",
        "`book/ledger.yml` by `python scripts/build_ledger.py`.",
        "",
        "本頁列出本書所依據兩篇文章中的每一個數字與可檢驗的主張：原文引述、英文說明、本書在哪裡重現、量測結果，",
        "以及判定（重現／部分重現／不同並說明原因／此處無法量測並說明原因），每個判定附一句中文說明。",
        "",
        f"**{len(claims)} claims:** {counts['reproduced']} reproduced, {counts['partly']} partly, {counts['differs']} differ, "
        f"{counts['not measurable here']} not measurable here.",
        "",
        "| claim | article | verdict | where |",
        "|---|---|---|---|",
    ]
    for c in claims:
        out.append(f"| {{ref}}`{c['id']}` | {names[c['article']]} | {MARK[c['verdict']]} | {c['where']} |")
    out.append("")
    for c in claims:
        out += _section(c, "##", [f"> 「{c['quote']}」", "", f"*{names[c['article']]}:* {c['gloss']}"])
    papers = data.get("paper_claims", [])
    if papers:
        out += ["## The paper's figures the book also measures", "",
                "Claims of Kwon et al. (SOSP 2023) that the articles do not quote but the book measures beside them;",
                "each is the paper's figure in English, with the same fields and verdicts as above.", ""]
        for c in papers:
            out += _section(c, "###", [f"> {c['claim']} ({c['source']})"])
    out += ["## Sentences with numbers that are not claims", ""]
    for group in data["not_claims"]:
        out.append(f"*{names[group['article']]}*, {group['why']}:")
        out.append("")
        out += [f"- 「{q}」" for q in group["quotes"]]
        out.append("")
    return "\n".join(out)


def main() -> int:
    PAGE.write_text(render(load()), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
