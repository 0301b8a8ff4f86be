"""How many more requests paging holds than contiguous reservations of several lengths (chapter 2).

The contiguous cache holds floor(budget / max_seq_len) requests whatever their real lengths; paging
holds as many as their current lengths fit. So the gain is not one number but a curve in the
reservation, and this module measures it at a few points and draws it beside the two runs it
comes from: the running-request counts over time, and the gain against the articles' 4-5x.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..sim.simulate import SimResult, simulate
from ..workload import Request
from .language import tr

POLICY_COLOURS: dict[str, str] = {"contiguous": "#CC6677", "paged": "#117733"}
BAR_COLOUR, ARTICLE_BAND_COLOUR = "#88CCEE", "#DDCC77"
ARTICLE_BAND = (4.0, 5.0)
"""The articles' claim, 4-5x the requests, drawn as a band for the measured gains to fall in or out of."""


@dataclass(frozen=True)
class ReservationGain:
    """Requests held while others wait: one paged run against contiguous runs of several reservations."""

    budget: int                        # KV slots, the same for every run
    paged_held: float                  # the paged run's mean running requests while some waited
    contiguous_held: dict[int, float]  # max_seq_len reserved per request -> the contiguous run's figure

    @property
    def gains(self) -> dict[int, float]:
        """Paged requests held over contiguous requests held, per reservation."""
        return {length: self.paged_held / held for length, held in self.contiguous_held.items()}

    def report(self) -> str:
        """One line per reservation: how many fit, how many each policy held, and the gain."""
        return "\n".join(    # each line rendered now, in the reader's language
            str(tr("max_seq_len {length:5,}: {fit:2d} reservations fit, contiguous holds {held:4.1f}, paged "
                   "{paged:.1f}: {gain:.1f}x", length=length, fit=self.budget // length, held=held,
                   paged=self.paged_held, gain=self.gains[length]))
            for length, held in self.contiguous_held.items())


def reservation_gain(requests: Sequence[Request], paged: SimResult, budget: int,
                     max_seq_lens: Iterable[int]) -> ReservationGain:
    """Simulate ``requests`` under contiguous reservations of each of ``max_seq_lens`` in ``budget`` KV slots
    and set each against ``paged``, a paged run of the same requests and budget (whose figure does not
    depend on the reservation: no paged request reserves its maximum)."""
    held = {length: simulate(requests, "contiguous", kv_budget_tokens=budget, max_seq_len=length).saturated_concurrency
            for length in max_seq_lens}
    return ReservationGain(budget, paged.saturated_concurrency, held)


def gain_figure(runs: Mapping[str, SimResult], gain: ReservationGain) -> Figure:
    """Left: requests running at each step of the ``runs`` (policy -> run); right: ``gain`` per reservation,
    against the articles' 4-5x band."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for policy, run in runs.items():
        left.plot([s.step for s in run.steps], [s.running for s in run.steps], color=POLICY_COLOURS[policy],
                  label=policy)
    num_requests = len(next(iter(runs.values())).requests)
    left.set(xlabel="decode step", ylabel="requests running",
             title=f"The same {num_requests} requests in {gain.budget:,} KV slots")
    left.legend()
    lengths = list(gain.gains)
    right.bar([f"{length:,}" for length in lengths], [gain.gains[length] for length in lengths], color=BAR_COLOUR,
              edgecolor="black", zorder=2)
    right.axhspan(*ARTICLE_BAND, color=ARTICLE_BAND_COLOUR, alpha=0.6, label="the article's 4-5x", zorder=1)
    for i, length in enumerate(lengths):
        right.text(i, gain.gains[length] + 0.15, f"{gain.gains[length]:.1f}x", ha="center")
    right.set(xlabel="max_seq_len reserved per request (contiguous)", ylabel="paged / contiguous requests held",
              title="Gain against the contiguous reservation")
    right.legend(loc="upper left")
    fig.tight_layout()
    return fig
