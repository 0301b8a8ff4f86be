"""KV memory of one batch in three caches: the paged pool, transformers' DynamicCache, a static cache (chapter 5).

Each is measured as the bytes of the K/V tensors it holds once the batch has generated, beside the
bytes its tokens need. transformers runs the batch as it must, left-padded to the longest prompt
with an attention mask over the padding, so its DynamicCache pays every row the longest row's
length; the static cache is sized for a context up front, chapter 1's reservation. The figure puts
the three on one log axis against the tokens' own bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from .decode import cache_bytes, returned_cache, static_cache_bytes
from ..engine.generate import GenerationResult

MIB = 2 ** 20
CACHE_COLOURS = ("#4477AA", "#EE6677", "#BBBBBB")   # paged, dynamic, static


@dataclass(frozen=True)
class KVMemory:
    """The K/V bytes each cache held for one batch, and what the batch's tokens need."""

    sequences: int
    tokens_held: int        # tokens whose K/V are cached, over all sequences
    bytes_per_token: int    # K and V of one token in every layer
    paged: int
    dynamic: int
    static: int
    static_len: int         # positions per row the static cache was sized for

    @property
    def token_bytes(self) -> int:
        """What the tokens need, with nothing padded or reserved: the floor every cache sits above."""
        return self.tokens_held * self.bytes_per_token

    @property
    def caches(self) -> dict[str, int]:
        """Label -> bytes, in the order the report and the figure show them."""
        return {"paged (ours)": self.paged, "DynamicCache": self.dynamic,
                f"static, {self.static_len:,} slots": self.static}

    def report(self) -> str:
        """The tokens' bytes, then one line per cache: its MiB and the share of it that holds tokens."""
        lines = [f"{self.sequences} sequences holding {self.tokens_held} tokens = {self.token_bytes / MIB:.1f} MiB of K/V"]
        lines += [f"{name:22s} {nbytes / MIB:8.1f} MiB   {self.token_bytes / nbytes:6.1%} holds tokens"
                  for name, nbytes in self.caches.items()]
        return "\n".join(lines)


def left_padded(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, both ``[batch, longest]``: each prompt right-aligned after padding,
    the mask 0 on the padding and 1 on the prompt. transformers batches prompts this way, so that
    every row's next token is generated in the same, last, column."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompts])
    starts = torch.tensor([width - len(p) for p in prompts])
    mask = (torch.arange(width)[None, :] >= starts[:, None]).long()
    return ids, mask


def kv_memory(paged: GenerationResult, hf_model: Any, prompts: Sequence[Sequence[int]], pad_token_id: int,
              bytes_per_token: int, new_tokens: int, static_len: int) -> KVMemory:
    """``paged``'s K/V bytes (our run of ``prompts``, ``new_tokens`` each) beside transformers' on the same batch:
    its DynamicCache after generating ``new_tokens`` for every row (greedy, no early stop, as ours), and a
    static cache of ``static_len`` positions per row."""
    ids, mask = left_padded(prompts, pad_token_id)
    out = hf_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            do_sample=False, pad_token_id=pad_token_id, return_dict_in_generate=True)
    return KVMemory(sequences=len(prompts), tokens_held=sum(t.num_tokens for t in paged.block_tables),
                    bytes_per_token=bytes_per_token, paged=paged.kv_bytes, dynamic=cache_bytes(returned_cache(out)),
                    static=static_cache_bytes(hf_model, len(prompts), max_cache_len=static_len), static_len=static_len)


def kv_memory_figure(memory: KVMemory, title: str) -> Figure:
    """One bar per cache on a log axis of MiB, the tokens' own bytes dashed, titled ``title``."""
    fig, ax = plt.subplots(figsize=(6.5, 2.6))
    names = list(memory.caches)
    values = [memory.caches[n] / MIB for n in names]
    held = memory.token_bytes / MIB
    ax.barh(names, values, color=list(CACHE_COLOURS))
    for y, v in enumerate(values):
        ax.text(v * 1.05, y, f"{v:.0f} MiB", va="center", fontsize=9)
    ax.axvline(held, color="black", ls="--", lw=1)
    ax.text(held * 1.05, 2.45, "K/V of the tokens held", fontsize=8, va="bottom")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator([10, 30, 100, 300, 1000]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:g}")
    ax.set_xlim(10, 2000)
    ax.set_xlabel("KV cache bytes (MiB, log scale)")
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig
