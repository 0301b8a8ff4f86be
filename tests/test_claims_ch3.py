"""Chapter 3's claims beyond its check cell: paged attention equals contiguous attention at the edges.

The notebook asserts the claim on its own batch (lengths 1, 15, 16, 17, 300 at block size 16,
9 query heads on 3 KV heads). These recompute through the package what its check cell leaves out:
the walk-through's slots, block sizes and GQA groups the chapter does not draw, tables padded past
what a sequence needs, the bf16 tolerance's size, and stores that write nothing.
"""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu.attention import (gather_kv, paged_decode_attention, paged_decode_attention_float64,
                                   sdpa_decode_attention, store_kv)
from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.block_pool import BlockPool
from pagedkv_edu.core.request import Request
from pagedkv_edu.model.paged_batch import random_paged_batch

CHAPTER_LENGTHS = [1, 15, 16, 17, 300]


def test_the_walk_through_writes_where_the_chapter_says() -> None:
    manager = BlockManager.over(BlockPool.from_free_order(12, 4, [7, 1, 3, 0, 9, 4, 11, 2, 5, 6, 8, 10]))
    seqs = {name: Request(name, None, num_prompt_tokens=n) for name, n in {"a": 4, "b": 3, "c": 6}.items()}
    prefill = []
    for seq in seqs.values():
        manager.admit(seq, seq.num_prompt_tokens)
        seq.num_computed_tokens = seq.num_prompt_tokens
        prefill += manager.table(seq).slot_mapping()
    assert prefill == [28, 29, 30, 31, 4, 5, 6, 12, 13, 14, 15, 0, 1]
    assert manager.table(seqs["c"]).slot_mapping()[4] == 0                 # the prediction: block 0, offset 0
    decode = []
    for seq in seqs.values():
        seq.output_token_ids.append(0)
        manager.grow(seq, 1)
        seq.num_computed_tokens += 1
        decode.append(manager.table(seq).slot_mapping()[-1])
    assert decode == [36, 7, 2] and manager.table(seqs["a"]).block_ids == [7, 9]   # only a's block was full


def test_the_chapters_batch_leaves_every_other_slot_unwritten() -> None:
    batch = random_paged_batch(CHAPTER_LENGTHS, 16, 9, 3, 64, seed=0)
    unwritten = int(batch.k_cache.isnan().any(-1).any(-1).sum())
    assert unwritten == batch.k_cache.shape[0] * 16 - sum(CHAPTER_LENGTHS) == 131


@pytest.mark.parametrize("block_size, num_heads, num_kv_heads, lengths", [
    (5, 6, 2, [1, 4, 5, 6, 37]),      # a block size that is not a power of two, GQA group 3
    (1, 4, 4, [1, 2, 9]),             # one token per block, no GQA
    (16, 8, 1, [16, 32, 33]),         # multi-query: every query head on one KV head
])
def test_paged_attention_equals_sdpa_at_other_shapes(block_size: int, num_heads: int, num_kv_heads: int,
                                                     lengths: list[int]) -> None:
    batch = random_paged_batch(lengths, block_size, num_heads, num_kv_heads, 16, seed=3)
    for table, n, k, v in zip(batch.tables, lengths, batch.keys, batch.values):
        assert torch.equal(gather_kv(batch.k_cache, table.block_ids, n), k)
        assert torch.equal(gather_kv(batch.v_cache, table.block_ids, n), v)
    paged = paged_decode_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                   backend="torch")
    torch.testing.assert_close(paged, sdpa_decode_attention(batch.q, batch.keys, batch.values), atol=1e-5, rtol=1e-5)


def test_a_table_longer_than_the_sequence_reads_only_the_blocks_it_needs() -> None:
    batch = random_paged_batch([3, 20], 8, 4, 2, 16, seed=5, table_width=6)
    assert batch.block_tables.shape[1] == 6 and int((batch.block_tables == -1).sum()) == 6 - 1 + 6 - 3
    paged = paged_decode_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                   backend="torch")
    assert paged.isfinite().all()                                          # no NaN slot, no -1 entry was read
    torch.testing.assert_close(paged, sdpa_decode_attention(batch.q, batch.keys, batch.values), atol=1e-5, rtol=1e-5)


def test_the_bf16_tolerance_is_a_few_roundings_of_8_significant_bits() -> None:
    assert torch.finfo(torch.bfloat16).eps == 2 ** -7
    bf16 = random_paged_batch(CHAPTER_LENGTHS, 16, 9, 3, 64, torch.bfloat16, seed=1)
    args = (bf16.q, bf16.k_cache, bf16.v_cache, bf16.block_tables, bf16.seq_lens)
    exact = paged_decode_attention_float64(*args)
    for out in (paged_decode_attention(*args, backend="torch"), sdpa_decode_attention(bf16.q, bf16.keys, bf16.values)):
        error = float((out.double() - exact).abs().max())
        assert 1e-4 < error < 2e-2        # bf16 is far from fp32's 1e-5, and within the chapter's 2e-2


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_store_of_padding_only_writes_nothing(backend: str) -> None:
    k = torch.randn(5, 2, 8)
    kc, vc = (torch.full((4, 4, 2, 8), float("nan")) for _ in range(2))
    store_kv(k, -k, kc, vc, torch.full((5,), -1, dtype=torch.int32), backend=backend)
    assert kc.isnan().all() and vc.isnan().all()


@pytest.mark.parametrize("dtype, block_size", [(torch.float32, 5), (torch.bfloat16, 16)])
def test_the_triton_store_writes_exactly_the_torch_stores_slots(dtype: torch.dtype, block_size: int) -> None:
    gen = torch.Generator().manual_seed(1)
    num_blocks, tokens = 12, 30
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:tokens].to(torch.int32)
    slots[::4] = -1
    k = torch.randn(tokens, 2, 8, generator=gen).to(dtype)
    caches = {}
    for backend in ("torch", "triton"):
        kc, vc = (torch.full((num_blocks, block_size, 2, 8), float("nan"), dtype=dtype) for _ in range(2))
        store_kv(k, -k, kc, vc, slots, backend=backend)
        caches[backend] = (kc, vc)
    kc = caches["triton"][0]
    written = kc.view(-1, 2, 8).isfinite().all(-1).all(-1)
    assert int(written.sum()) == int((slots >= 0).sum())                  # every non-padding token, nothing else
    assert torch.equal(kc.view(-1, 2, 8)[slots[slots >= 0].long()], k[slots >= 0])
    for a, b in zip(caches["torch"], caches["triton"]):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
