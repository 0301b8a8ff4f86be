"""Chapter 3's figure: where a batch's blocks landed, and how far paged attention is from contiguous SDPA.

The claim is that gathering through shuffled block tables changes nothing, so the figure shows the
two things together: the scatter (each sequence's blocks, coloured by owner, across the physical
cache) and the result (the largest difference per sequence, on a log scale against float32's
epsilon). A difference of exactly 0 cannot sit on a log axis, so it is drawn at the floor and labelled.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from ..model.paged_batch import PagedBatch

FREE_COLOUR = "#dddddd"
ERROR_FLOOR, ERROR_CEILING = 1e-12, 1e-4


def block_owners(batch: PagedBatch) -> list[int]:
    """For each physical block of ``batch``'s cache, the index of the sequence whose table holds it; -1 if free."""
    owner = torch.full((batch.k_cache.shape[0],), -1)
    for i, table in enumerate(batch.tables):
        owner[table.block_ids] = i
    return owner.tolist()


def parity_figure(batch: PagedBatch, errors: torch.Tensor) -> Figure:
    """Left: ``batch``'s physical blocks coloured by sequence (grey: free); right: ``errors[i]``, the largest
    |paged - SDPA| of sequence ``i``, per sequence length."""
    lengths = batch.seq_lens.tolist()
    owners = block_owners(batch)
    colours = plt.get_cmap("tab10")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.2), gridspec_kw={"width_ratios": [2.2, 1]})
    for block, who in enumerate(owners):
        left.add_patch(plt.Rectangle((block, 0), 1, 1, color=colours(who) if who >= 0 else FREE_COLOUR, ec="white",
                                     lw=0.5))
    left.set(xlim=(0, len(owners)), ylim=(0, 1), yticks=[], xlabel="physical block id",
             title="Where each sequence's blocks live (grey: free)")
    for i, n in enumerate(lengths):
        left.plot([], [], "s", color=colours(i), label=f"{n} token{'s' if n > 1 else ''}")
    left.legend(ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.35), frameon=False)
    right.bar([str(n) for n in lengths], errors.clamp_min(ERROR_FLOOR).tolist(),
              color=[colours(i) for i in range(len(lengths))])
    for i, e in enumerate(errors.tolist()):
        if e == 0:
            right.text(i, 2 * ERROR_FLOOR, "0 (exact)", ha="center", va="bottom", fontsize=8)
    right.axhline(torch.finfo(torch.float32).eps, color="black", ls="--", lw=1, label="float32 epsilon")
    right.set(yscale="log", ylim=(ERROR_FLOOR, ERROR_CEILING), xlabel="sequence length", ylabel="max |paged − SDPA|",
              title="Paged vs contiguous attention")
    right.legend(loc="upper left")
    fig.tight_layout()
    return fig
