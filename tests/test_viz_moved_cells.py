"""The views chapters 2, 3 and 5 call: each figure draws its data (the bars are the numbers given), and each
text view prints what the notebook's output shows."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from pagedkv_edu.model.paged_batch import random_paged_batch  # noqa: E402
from pagedkv_edu.sim.simulate import simulate  # noqa: E402
from pagedkv_edu.viz.attention_parity import block_owners, parity_figure  # noqa: E402
from pagedkv_edu.viz.cache_contents import cache_contents  # noqa: E402
from pagedkv_edu.bench.kv_memory import KVMemory, kv_memory_figure  # noqa: E402
from pagedkv_edu.viz.reservation_gain import ReservationGain, gain_figure  # noqa: E402
from pagedkv_edu.workload import copilot50  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _bar_heights(ax) -> list[float]:
    return [p.get_height() for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle) and p.get_width() < 1]


def test_the_gain_figure_draws_both_runs_and_one_bar_per_reservation() -> None:
    requests = copilot50(seed=0)[:12]
    runs = {p: simulate(requests, p, kv_budget_tokens=4096, block_size=16) for p in ("contiguous", "paged")}
    gain = ReservationGain(budget=4096, paged_held=6.0, contiguous_held={2048: 2.0, 4096: 1.0})
    fig = gain_figure(runs, gain)
    left, right = fig.axes
    assert [line.get_label() for line in left.get_lines()] == ["contiguous", "paged"]
    assert list(left.get_lines()[1].get_ydata()) == [s.running for s in runs["paged"].steps]
    assert left.get_title() == "The same 12 requests in 4,096 KV slots"
    assert [t.get_text() for t in right.get_xticklabels()] == ["2,048", "4,096"]
    assert [p.get_height() for p in right.containers[0]] == [3.0, 6.0]     # 6 / 2 and 6 / 1
    assert [t.get_text() for t in right.texts] == ["3.0x", "6.0x"]
    assert right.get_title() == "Gain against the contiguous reservation"


def test_the_parity_figure_colours_each_block_by_its_owner_and_draws_each_error() -> None:
    batch = random_paged_batch([1, 5, 9], 4, 2, 1, 8, seed=0)
    owners = block_owners(batch)
    assert sorted(i for i in owners if i >= 0) == [0, 1, 1, 2, 2, 2]        # 1, 2 and 3 blocks of 4 slots
    assert owners.count(-1) == batch.k_cache.shape[0] - 6
    errors = torch.tensor([0.0, 3e-7, 2e-6])
    fig = parity_figure(batch, errors)
    left, right = fig.axes
    assert len(left.patches) == batch.k_cache.shape[0]
    assert [p.get_height() for p in right.containers[0]] == pytest.approx([1e-12, 3e-7, 2e-6])
    assert [t.get_text() for t in right.texts] == ["0 (exact)"]             # a zero sits on the floor, labelled
    assert [t.get_text() for t in right.get_xticklabels()] == ["1", "5", "9"]
    assert right.get_yscale() == "log" and right.get_title() == "Paged vs contiguous attention"


def test_cache_contents_names_the_token_in_every_slot_of_the_blocks_written() -> None:
    k_cache = torch.full((4, 4, 1, 1), float("nan"))
    names = ["a0", "a1", "b0", "pad"]
    slots = [9, 10, 0, -1]                                                   # a in block 2, b in block 0
    for i, s in enumerate(slots[:3]):
        k_cache.view(-1, 1, 1)[s] = i
    assert cache_contents(k_cache, names, slots).splitlines() == [
        "  block  0:  b0   .   .   .",
        "  block  2:   .  a0  a1   .",
    ]


def test_the_kv_memory_report_and_figure_show_each_cache_against_the_tokens() -> None:
    mib = 2 ** 20
    memory = KVMemory(sequences=2, tokens_held=160, bytes_per_token=64 * 1024, paged=12 * mib, dynamic=40 * mib,
                      static=400 * mib, static_len=1024)
    assert memory.report().splitlines() == [
        "2 sequences holding 160 tokens = 10.0 MiB of K/V",
        "paged (ours)               12.0 MiB    83.3% holds tokens",
        "DynamicCache               40.0 MiB    25.0% holds tokens",
        "static, 1,024 slots       400.0 MiB     2.5% holds tokens",
    ]
    ax = kv_memory_figure(memory, "a title").axes[0]
    assert [p.get_width() for p in ax.containers[0]] == pytest.approx([12.0, 40.0, 400.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == list(memory.caches)
    assert ax.get_lines()[0].get_xdata()[0] == 10.0          # the tokens' own 10 MiB, dashed
    assert ax.get_title() == "a title" and ax.get_xscale() == "log"
