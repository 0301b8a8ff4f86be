"""Reading the committed serve records back: what chapter 6, part 2 prints and fits.

A full-size serving run takes most of an hour on a 2-core CPU, so the chapter does not run it: it reads
the records ``serve-bench`` and ``bench chunked-prefill`` wrote into ``results/`` (see results/README.md).
The functions here turn those records into the chapter's text and numbers, so that the notebook shows
the argument and the same code is tested against the same files. Each summary names where and when its
record was measured: a record's seconds are its machine's, and two records compare only on one machine
and one code version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import RESULTS_DIR

Record = dict[str, Any]
"""One committed JSON record, as ``json.loads`` returns it."""


def load(pattern: str, directory: Path = RESULTS_DIR) -> list[Record]:
    """The records whose file names match ``pattern``, in file-name order (the names start with the date)."""
    return [json.loads(path.read_text()) for path in sorted(directory.glob(pattern))]


def serve_records(directory: Path = RESULTS_DIR) -> list[Record]:
    """Every committed ``serve-*.json`` that holds engine runs; the arrivals record, which holds none, is read apart."""
    return [record for record in load("serve-*.json", directory) if "runs" in record]


def full_size(records: list[Record]) -> list[Record]:
    """The records of the whole experiment: lengths unscaled, and both memories run under the same budget."""
    return [r for r in records if r["length_scale"] == 1 and {"paged", "contiguous"} <= set(r["runs"])]


def where(record: Record) -> str:
    """Where and when a record was measured, with what: the machine, the date, torch and its thread count."""
    return f"{record['device'].split(',')[0]}, {record['date_utc']}, torch {record['torch']}, {record['torch_threads']} threads"


def describe_serve_record(record: Record) -> str:
    """A serve record in a few lines: its workload and machine, then one line per engine run and per peer.

    Concurrency, utilisation, preemptions and steps do not depend on the machine; tokens per second and
    TTFT do, which is why the first line names the machine and the date.
    """
    backend = record.get("attention_backend", "torch")   # records before the field ran the default (results/README.md)
    lines = [f"{record['model']}, lengths x{record['length_scale']:g}, outputs x{record.get('output_scale', 1):g}, "
             f"block size {record['block_size']}: measured {record['date_utc']} on {record['device'].split(',')[0]}, "
             f"{backend} attention (torch {record['torch']})"]
    for policy, run in record["runs"].items():
        lines.append(f"  {policy:19s} peak {run['peak_concurrency']:3d}, {run['saturated_concurrency']:5.1f} while queued, "
                     f"KV utilisation {run['kv_utilisation']:.2f}, {run['preemptions']:3d} preemptions, {run['steps']:5d} steps, "
                     f"{run['throughput_tokens_per_s']:6.1f} tokens/s, mean TTFT {run['ttft_mean_s']:6.1f} s")
    for peer in record.get("peers", []):
        result = peer.get("error") or f"{peer['throughput_tokens_per_s']} tokens/s"
        lines.append(f"  {peer['policy']}: {result}" + (f" ({peer['note']})" if "note" in peer else ""))
    if "vs_transformers_static" in record:   # --peers records since 2026-12-01: the ratio, measured in one run
        vs = record["vs_transformers_static"]
        lines.append(f"  paged engine / transformers static batching: {vs['throughput_ratio']}x throughput, "
                     f"same greedy tokens: {vs['same_tokens']}")
    return "\n".join(lines)


def decode_steps(run: Record) -> tuple[np.ndarray, np.ndarray]:
    """(batch, seconds) of a run's steps whose batch equals the step before's: decode only, as near as a record tells.

    A record keeps the clock after every step but not what each step computed. A step whose batch did not
    change admitted nobody (no prefill) and finished nobody, so it is a decode step of that batch.
    """
    t = run["timeline"]
    seconds, running = np.diff([0.0] + t["elapsed_s"]), np.array(t["running"])
    steady = np.r_[False, running[1:] == running[:-1]]
    return running[steady], seconds[steady]


@dataclass(frozen=True)
class DecodeStepFit:
    """What a decode step cost in a full-size record, and the two factors of its throughput ratio.

    ``fixed + per_seq * batch`` is a least-squares line through every decode step of both runs. The
    ratio of throughputs factors into ``steps_factor`` (how many fewer steps the paged run needed) over
    ``cost_factor`` (how much more each of its steps cost on average): fewer, costlier steps can cancel.
    """

    batch: np.ndarray                                      # every decode step's batch, the paged run's first
    seconds: np.ndarray                                    # and its seconds on the record's machine
    medians: dict[str, tuple[list[int], list[float]]]     # per policy: the batches seen in 5 or more steps, their median seconds
    fixed: float
    per_seq: float
    steps_factor: float
    cost_factor: float

    def median_seconds(self, batch: int) -> float:
        """The median seconds of the decode steps of ``batch`` sequences, both runs pooled."""
        return float(np.median(self.seconds[self.batch == batch]))


def fit_decode_steps(record: Record) -> DecodeStepFit:
    """Fit a full-size record's decode steps, and split its throughput ratio into fewer steps over costlier ones."""
    batches, seconds, medians = [], [], {}
    for policy in ("paged", "contiguous"):
        batch, secs = decode_steps(record["runs"][policy])
        batches.append(batch)
        seconds.append(secs)
        sizes = [int(b) for b in sorted(set(batch)) if (batch == b).sum() >= 5]
        medians[policy] = (sizes, [float(np.median(secs[batch == b])) for b in sizes])
    batch, secs = np.concatenate(batches), np.concatenate(seconds)
    per_seq, fixed = np.polyfit(batch, secs, 1)
    paged, contiguous = record["runs"]["paged"], record["runs"]["contiguous"]
    mean_step = [float(np.mean(np.diff([0.0] + run["timeline"]["elapsed_s"]))) for run in (paged, contiguous)]
    return DecodeStepFit(batch=batch, seconds=secs, medians=medians, fixed=float(fixed), per_seq=float(per_seq),
                         steps_factor=contiguous["steps"] / paged["steps"], cost_factor=mean_step[0] / mean_step[1])


@dataclass(frozen=True)
class PeerRecords:
    """The records that compare the engine with transformers, sorted by the code they measured.

    Only records of one commit are compared with each other: the engine changed between the earlier
    records, which were made before records named their code, so those are history, not a spread.
    """

    newest: Record            # the newest record that names its commit
    same_code: list[Record]   # every record of that commit, in file order
    earlier: list[Record]     # the records that name no commit


def peer_records(records: list[Record]) -> PeerRecords:
    """Split the serve records that hold ``vs_transformers_static`` by the code they measured."""
    peers = [r for r in records if "vs_transformers_static" in r]
    newest = max((r for r in peers if "commit" in r), key=lambda r: r["date_utc"])   # records name their code since 2026-12-02
    return PeerRecords(newest=newest, same_code=[r for r in peers if r.get("commit") == newest["commit"]],
                       earlier=[r for r in peers if "commit" not in r])


def describe_peers(peers: PeerRecords) -> str:
    """The engine against transformers' static batching, all requests at once: each run of the newest code in full
    (its alternating pairs, its decode step against the bandwidth floor, its profile), then the earlier ratios."""
    lines = [f"all at once, commit {peers.newest['commit']} (compared only with records of the same code):"]
    for r in peers.same_code:
        vs, floor = r["vs_transformers_static"], r.get("decode_floor")
        lines.append(f"({where(r)}): engine {r['runs']['paged']['wall_seconds']} s, static generate "
                     f"{r['peers'][0]['wall_seconds']} s: {vs['throughput_ratio']}x, same greedy tokens: {vs['same_tokens']}")
        if len(vs.get("pairs", [])) > 1:                       # --repeats: the two systems alternated
            lines.append("   alternating pairs: " + ", ".join(f"{p['engine_s']} s against {p['static_s']} s ({p['ratio']}x)"
                                                             for p in vs["pairs"]) + f"; median {vs['throughput_ratio']}x")
        if floor:
            lines.append(f"   a decode step: {floor['mean_step_s'] * 1e3:.0f} ms against a floor of "
                         f"{floor['mean_floor_s'] * 1e3:.0f} ms (weights + K/V read at "
                         f"{floor['copy_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s): {floor['ratio_to_floor']}x")
            for kind, row in r["breakdown"].items():
                parts = ", ".join(f"{k} {row[k]:.1f} s" for k in ("linear", "attention", "kv_gather", "other"))
                lines.append(f"   {kind:8s} {row['steps']:3d} steps, {row['total_s']:5.1f} s (profiled): {parts}")
    lines.append("earlier records, of code before records named their commit (history, not compared): "
                 + ", ".join(f"{r['date_utc'][:16]} {r['vs_transformers_static']['throughput_ratio']}x" for r in peers.earlier))
    return "\n".join(lines)


def describe_arrivals(record: Record) -> str:
    """Requests arriving over time: each system's throughput and mean latency, then the engine over static ``generate``."""
    a = record["arrivals"]
    lines = [f"arriving at {a['arrival_rate_per_s']}/s over {a['arrivals_s'][-1]:.0f} s, {record['num_requests']} requests, "
             f"full outputs ({where(record)}):"]
    for run in [a["engine"], *a["peers"]]:
        lines.append(f"   {run['policy']:62s} " + (run.get("error") or f"{run['throughput_tokens_per_s']:5.2f} tokens/s, "
                                                   f"mean latency {run['latency_mean_s']:6.1f} s"
                                                   + (f", mean TTFT {run['ttft_mean_s']:.1f} s" if "ttft_mean_s" in run else "")))
    vs = a["vs_transformers_static"]
    lines.append(f"   engine / static generate: {vs['throughput_ratio']}x throughput, {vs['latency_ratio']}x lower mean "
                 f"latency, same greedy tokens: {vs['same_tokens']}")
    return "\n".join(lines)


def describe_chunked_prefill(record: Record) -> str:
    """Prefilling the same prompts under each token budget, against one unchunked step: steps, seconds, first tokens."""
    lines = [f"prefilling {record['requests']} prompts, {record['prompt_tokens']:,} tokens ({where(record)}), "
             f"best of {record['repeats']}:"]
    for run in record["runs"]:
        cap = "no cap" if run["max_num_batched_tokens"] is None else f"{run['max_num_batched_tokens']:,} tokens"
        lines.append(f"   {cap:>13s} per step: {run['steps']:2d} steps, {run['best_seconds']:5.1f} s, "
                     f"{run['vs_unchunked']:.2f}x the unchunked time, same first tokens: {run['same_first_tokens']}")
    return "\n".join(lines)
