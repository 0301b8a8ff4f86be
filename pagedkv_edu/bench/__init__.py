"""``python -m pagedkv_edu bench <benchmark>``: measured performance, and the files that keep it.

A benchmark is a module with ``register(subparsers)``, listed in ``BENCHMARKS``. ``--out FILE``
writes a JSON record with the metadata ``results/README.md`` requires; chapters plot the newest
committed record with :func:`latest_result` and say where and when it was measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import subprocess
from pathlib import Path
from typing import Any

from .. import runtime

BENCHMARKS: tuple[str, ...] = (
    "pagedkv_edu.bench.attention",
    "pagedkv_edu.bench.decode",
    "pagedkv_edu.bench.chunked_prefill",
    "pagedkv_edu.bench.widgets",
)

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"
"""The repository's ``results/`` directory (the package is used from a checkout)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks: kernel time, bandwidth, throughput (ch. 4-8)",
                                   description="Measured performance. Each benchmark takes --json and --out FILE.")
    benchmarks = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    benchmarks.required = True
    for name in BENCHMARKS:
        importlib.import_module(name).register(benchmarks)


def add_out_flag(parser: argparse.ArgumentParser) -> None:
    """``--out FILE``: also write the result, with its metadata, as a JSON record."""
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="write the JSON record (with device, date and versions) to FILE, e.g. "
                             "results/<benchmark>-<YYYY-MM-DD>.json")


def source_commit(root: Path = RESULTS_DIR.parent) -> str:
    """The git commit the package runs from, ``+dirty`` when its files differ from it; "unknown" outside a checkout.

    Every record names it, so that a chapter compares records of one code version only.
    """
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pagedkv_edu"], cwd=root, capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def metadata(benchmark: str) -> dict[str, Any]:
    """The fields every result record carries (see results/README.md), the code's commit among them."""
    versions = runtime.versions()
    return {
        "benchmark": benchmark,
        "commit": source_commit(),
        "device": runtime.device_name(),
        "backend": runtime.BACKEND,
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": versions["python"],
        "torch": versions["torch"],
        "triton": versions["triton"],
        "versions": versions,
    }


def heading(what: str, record: dict[str, Any]) -> str:
    """A table's first line: what was measured, where, when, with which versions."""
    return f"{what} on {record['device']} ({record['date_utc']}; torch {record['torch']}, triton {record['triton']})"


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as indented JSON, creating the parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def emit(args: argparse.Namespace, record: dict[str, Any], print_table: Any) -> dict[str, Any]:
    """Finish a benchmark: write ``--out`` if asked, print the table unless ``--json``; return the record."""
    if getattr(args, "out", None) is not None:
        write_record(args.out, record)
    if not args.json:
        print_table(record)
        if getattr(args, "out", None) is not None:
            print(f"wrote {args.out}")
    return record


def latest_result(benchmark: str, backend: str = "cuda", directory: Path = RESULTS_DIR) -> tuple[Path, dict] | None:
    """The newest committed record of ``benchmark`` measured on ``backend``, or None."""
    records = []
    for path in directory.glob(f"{benchmark}-*.json"):
        record = json.loads(path.read_text())
        if record.get("benchmark") == benchmark and record.get("backend") == backend:
            records.append((record.get("date_utc", ""), path, record))
    if not records:
        return None
    _, path, record = max(records, key=lambda r: (r[0], r[1].name))
    return path, record
