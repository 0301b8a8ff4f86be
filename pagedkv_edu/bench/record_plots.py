"""Figures of the committed serve records (chapter 6, part 2): pure functions from a record to a figure.

The records are read by :mod:`pagedkv_edu.bench.records`; these draw them. Each figure's title names the
record's machine and date, because its seconds are that machine's. The policies keep part 1's colours, so
"paged" is the same green in the small run and at full size.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .records import DecodeStepFit, Record

POLICY_COLOURS: dict[str, str] = {"paged": "#117733", "contiguous": "#CC6677"}


def serve_timelines(record: Record) -> Figure:
    """A full-size record's requests running and KV utilisation at every engine step, paged beside contiguous."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for policy in ("paged", "contiguous"):
        t = record["runs"][policy]["timeline"]
        axes[0].plot(t["running"], color=POLICY_COLOURS[policy], label=policy)
        axes[1].plot(t["kv_utilisation"], color=POLICY_COLOURS[policy], label=policy)
    axes[0].set(xlabel="engine step", ylabel="requests running", title="Concurrency, full size")
    axes[1].set(xlabel="engine step", ylabel="tokens / held KV slots", title="KV utilisation, full size", ylim=(0, 1.05))
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"Committed record: {record['model']} on {record['device'].split(',')[0]}, {record['date_utc'][:10]}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def decode_step_fit(fit: DecodeStepFit) -> Axes:
    """Median seconds of a decode step against its batch, per policy, with the fitted line through all of them."""
    _, ax = plt.subplots(figsize=(5.5, 3.4))
    for policy, (sizes, medians) in fit.medians.items():
        ax.plot(sizes, medians, "o", color=POLICY_COLOURS[policy], label=policy)
    grid = np.arange(1, fit.batch.max() + 1)
    ax.plot(grid, fit.fixed + fit.per_seq * grid, "k--", lw=1, label=f"fit: {fit.fixed:.2f} s + {fit.per_seq:.3f} s × batch")
    ax.set(xlabel="sequences in the decode step", ylabel="seconds per step (record's CPU)", ylim=(0, None),
           title="A decode step at full-size context")
    ax.legend(fontsize=8)
    return ax


def arrivals_bars(record: Record) -> Figure:
    """Requests arriving over time: each system's throughput and mean latency, the runs that failed left out."""
    a = record["arrivals"]
    done = [run for run in [a["engine"], *a["peers"]] if "error" not in run]
    fig, axes = plt.subplots(1, 2, figsize=(11, 2.8))
    names = [run["policy"].split(" (")[0] for run in done]
    axes[0].barh(names, [run["throughput_tokens_per_s"] for run in done], color="#332288")
    axes[1].barh(names, [run["latency_mean_s"] for run in done], color="#88CCEE")
    axes[0].set(xlabel="tokens per second")
    axes[1].set(xlabel="mean latency from arrival (s)", yticks=[])
    fig.suptitle(f"Requests arriving over time: committed record, {record['date_utc'][:10]}", fontsize=10)
    fig.tight_layout()
    return fig
