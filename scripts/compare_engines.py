"""The paged engine of an earlier commit against today's and transformers' static ``generate``, alternating (issue 20).

Issue 20 asks for "no regression" against a single earlier run. One run on this shared machine
is not enough: its copy bandwidth read anywhere from 13 to 25 GB/s in one afternoon. This
script runs serve-bench's 16 full-length requests (outputs divided by five) through the old
engine, today's engine and transformers' static batches of eight, each in its own process,
one after the other, ``--pairs`` times, and records every wall time, the ratios within each
round, and whether the three produced the same greedy tokens. Run it on an idle machine:

    git worktree add --detach /tmp/engine-old 569df18
    python scripts/compare_engines.py --old /tmp/engine-old --pairs 2 \
        --out results/engine-before-after-<date>.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, torch
torch.set_num_threads(2)
from pagedkv_edu.model.loading import load_model
from pagedkv_edu.bench.serve import make_setup, run_engine, run_hf_static
model = load_model("smollm2-135m")
setup = make_setup(model, num_requests=16, output_scale=0.2)
run = run_engine(model, setup, "paged") if sys.argv[1] == "engine" else run_hf_static(model, setup)
print(json.dumps({"wall_seconds": run["wall_seconds"], "token_ids": run["token_ids"]}))
"""


def run(root: Path, what: str) -> dict:
    """One measurement in a fresh process importing the package under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", CHILD, what], env=env, cwd=root, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def commit(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="a checkout of the earlier commit")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from pagedkv_edu.bench import metadata, write_record

    record = {**metadata("engine-before-after"), "old_commit": commit(args.old), "new_commit": commit(ROOT),
              "workload": "serve-bench copilot50, 16 requests, outputs x0.2, smollm2-135m, 2 threads", "rows": []}
    tokens = []
    for i in range(args.pairs):
        old, new, static = run(args.old, "engine"), run(ROOT, "engine"), run(ROOT, "static")
        tokens += [old["token_ids"], new["token_ids"], static["token_ids"]]
        row = {"round": i, "old_engine_s": old["wall_seconds"], "new_engine_s": new["wall_seconds"],
               "static_generate_s": static["wall_seconds"]}
        row |= {"new_faster_than_old": round(row["old_engine_s"] / row["new_engine_s"], 2),
                "old_vs_static": round(row["static_generate_s"] / row["old_engine_s"], 2),
                "new_vs_static": round(row["static_generate_s"] / row["new_engine_s"], 2)}
        record["rows"].append(row)
        print(json.dumps(row))
    record["same_tokens"] = all(t == tokens[0] for t in tokens)
    record["median"] = {k: round(statistics.median(r[k] for r in record["rows"]), 3)
                        for k in ("new_faster_than_old", "old_vs_static", "new_vs_static")}
    print(json.dumps({"same_tokens": record["same_tokens"], "median": record["median"]}))
    if args.out is not None:
        write_record(args.out, record)


if __name__ == "__main__":
    main()
