"""The paged KV cache: sizing, layout, slot-mapped writes through the block manager, reads back."""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu import runtime
from pagedkv_edu.attention import paged_decode_attention_float64, sdpa_decode_attention
from pagedkv_edu.core.block_manager import BlockManager
from pagedkv_edu.core.request import Request
from pagedkv_edu.attention.kv_cache import PagedKVCache, block_bytes
from pagedkv_edu.specs import get_spec

DEVICE = runtime.device()


def test_layout_and_sizes() -> None:
    cache = PagedKVCache(num_layers=3, num_blocks=10, block_size=16, num_kv_heads=2, head_dim=8,
                         dtype=torch.bfloat16, device=DEVICE)
    assert len(cache.k_caches) == len(cache.v_caches) == 3
    for t in cache.k_caches + cache.v_caches:
        assert t.shape == (10, 16, 2, 8) and t.dtype == torch.bfloat16 and t.is_contiguous()
    measured = sum(t.numel() * t.element_size() for t in cache.k_caches + cache.v_caches)
    assert cache.bytes == measured
    assert cache.bytes_per_block * cache.num_blocks == measured
    assert (cache.num_layers, cache.num_blocks, cache.block_size, cache.num_kv_heads, cache.head_dim) == (3, 10, 16, 2, 8)


def test_from_budget_matches_llama_per_token_cost() -> None:
    """Llama-3.2-1B in bf16 costs 32 KiB per token (chapter 0); a 1 MiB budget is 32 tokens = 2 blocks."""
    spec = get_spec("llama-3.2-1b")
    per_block = block_bytes(spec.num_layers, 16, spec.num_kv_heads, spec.head_dim, torch.bfloat16)
    assert per_block == 16 * spec.kv_bytes_per_token
    cache = PagedKVCache.from_budget(2 * per_block + per_block // 2, 1, 16, spec.num_kv_heads, spec.head_dim,
                                     torch.bfloat16, "cpu")
    # One layer is 1/16 of the per-block cost, so the same budget buys 16x more single-layer blocks.
    assert cache.num_blocks == (2 * per_block + per_block // 2) // (per_block // spec.num_layers)
    assert cache.bytes <= 2 * per_block + per_block // 2 < cache.bytes + cache.bytes_per_block


@pytest.mark.parametrize("bad,message", [
    (dict(num_blocks=0), r"num_blocks must be a whole number >= 1, got 0"),
    (dict(block_size=2.0), r"block_size must be a whole number >= 1, got 2.0"),
    (dict(dtype=torch.int8), r"dtype torch.int8 is not supported"),
])
def test_rejects_bad_shapes(bad, message) -> None:
    args = dict(num_layers=1, num_blocks=4, block_size=4, num_kv_heads=1, head_dim=8) | bad
    with pytest.raises(ValueError, match=message):
        PagedKVCache(**args, device="cpu")


def test_from_budget_rejects_a_budget_below_one_block() -> None:
    with pytest.raises(ValueError, match=r"a budget of 100 bytes is smaller than one block \(1024 bytes"):
        PagedKVCache.from_budget(100, 2, 16, 1, 4, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"budget_bytes must be a whole number >= 1, got -5"):
        PagedKVCache.from_budget(-5, 2, 16, 1, 4, torch.float32, "cpu")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_prefill_then_decode_through_the_block_manager(backend: str) -> None:
    """Chapter 2's block manager hands out slots; the cache stores there and reads back the same K/V.

    Three sequences are prefilled in one interleaved call (with a padding token), then each
    decodes two tokens; every layer's gathered K/V must equal what was written, and paged
    attention over it must equal SDPA over the contiguous K/V.
    """
    num_kv_heads, head_dim, block_size = 2, 16, 4
    cache = PagedKVCache(2, 12, block_size, num_kv_heads, head_dim, device=DEVICE)
    manager = BlockManager(num_blocks=12, block_size=block_size, max_seq_len=64)
    gen = torch.Generator().manual_seed(0)
    records = [Request(i, None, num_prompt_tokens=n) for i, n in enumerate((5, 4, 9))]
    written: dict[Request, list[list[torch.Tensor]]] = {s: [[], []] for s in records}  # per seq, per layer

    def new_kv(n: int) -> torch.Tensor:
        return torch.randn(n, num_kv_heads, head_dim, generator=gen).to(DEVICE)

    slots: list[int] = []
    owners: list[Request | None] = []
    for seq in records:                 # playing the scheduler: room for the prompt, then the count advances
        n = seq.num_prompt_tokens
        manager.admit(seq, n)
        seq.num_computed_tokens = n
        slots += manager.table(seq).slot_mapping()
        owners += [seq] * n
    slots.insert(3, -1)  # a padding token in the middle of the batch
    owners.insert(3, None)
    slot_mapping = torch.tensor(slots, dtype=torch.int32, device=DEVICE)
    for layer in range(2):
        k = new_kv(len(slots))
        cache.store(layer, k, -k, slot_mapping, backend=backend)
        for seq in records:
            rows = [i for i, o in enumerate(owners) if o is seq]
            written[seq][layer].append(k[rows])

    for _ in range(2):  # two decode steps: one token per sequence
        step = []
        for seq in records:
            seq.output_token_ids.append(0)          # its sampled token, whose K/V this step writes
            manager.grow(seq, 1)
            seq.num_computed_tokens += 1
            step.append(manager.table(seq).slot_mapping()[-1])
        slot_mapping = torch.tensor(step, dtype=torch.int32, device=DEVICE)
        for layer in range(2):
            k = new_kv(len(step))
            cache.store(layer, k, -k, slot_mapping, backend=backend)
            for i, seq in enumerate(records):
                written[seq][layer].append(k[i:i + 1])

    seqs = records
    tables = [manager.table(s).block_ids for s in seqs]
    lens = [manager.table(s).num_tokens for s in seqs]
    block_tables = torch.full((3, max(map(len, tables))), -1, dtype=torch.int32)
    for i, t in enumerate(tables):
        block_tables[i, : len(t)] = torch.tensor(t)
    block_tables, seq_lens = block_tables.to(DEVICE), torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    q = torch.randn(3, 4, head_dim, generator=gen).to(DEVICE)
    for layer in range(2):
        keys = [torch.cat(written[s][layer]) for s in seqs]
        for i in range(len(seqs)):
            k, v = cache.gather(layer, tables[i], lens[i])
            assert torch.equal(k, keys[i]) and torch.equal(v, -keys[i])
        out = cache.decode_attention(layer, q, block_tables, seq_lens, backend="triton")
        oracle = sdpa_decode_attention(q, keys, [-k for k in keys])
        torch.testing.assert_close(out, oracle, atol=2e-5, rtol=2e-5)
        ref = paged_decode_attention_float64(q, cache.k_caches[layer], cache.v_caches[layer], block_tables, seq_lens)
        torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)


def test_store_and_gather_reject_bad_layer_and_table() -> None:
    cache = PagedKVCache(2, 4, 4, 1, 8, device=DEVICE)
    k = torch.zeros(1, 1, 8, device=DEVICE)
    with pytest.raises(IndexError, match=r"layer 2 is out of range for a cache of 2 layers"):
        cache.store(2, k, k, torch.tensor([0], dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match=r"names a block outside 0..3"):
        cache.gather(0, [1, 7], 6)
    with pytest.raises(ValueError, match=r"seq_len 9 needs 3 blocks of 4, the table has 2"):
        cache.gather(0, [1, 2], 9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(4))
def test_attend_on_the_torch_path_equals_the_float64_reference(dtype: torch.dtype, seed: int) -> None:
    """The engine's ``"torch"`` attend (whole-block gathers, an additive mask) on a mixed step, scattered tables.

    Decode rows of unequal lengths share one padded batch; prefill rows read a cached prefix
    or only their own K/V. Every slot outside a sequence holds a huge finite value, so a
    position the mask should hide would move the output.
    """
    from pagedkv_edu.attention import paged_attention_float64
    from pagedkv_edu.attention.kv_cache import StepMetadata

    gen = torch.Generator().manual_seed(seed)
    block_size = [3, 5, 16, 4][seed]
    kv_heads, group, head_dim = 2, [1, 3, 2, 4][seed], 8
    query_lens = [1, 1, 7, 1, 4][: 3 + seed % 3]
    seq_lens = [int(n + torch.randint(0, 3 * block_size, (1,), generator=gen)) for n in query_lens]
    seq_lens[2] = query_lens[2] if seed % 2 else seq_lens[2]     # a prefill whose whole context is new
    need = [-(-n // block_size) for n in seq_lens]
    cache = PagedKVCache(1, sum(need) + 3, block_size, kv_heads, head_dim, dtype=dtype, check=False)
    cache.k_caches[0].fill_(1e4)                                  # every slot no sequence owns: loud
    cache.v_caches[0].fill_(1e4)
    ids = torch.randperm(sum(need) + 3, generator=gen).tolist()
    tables = [[ids.pop() for _ in range(n)] for n in need]
    slots = [b * block_size + i % block_size for t, n in zip(tables, seq_lens) for i, b in
             enumerate(b for b in t for _ in range(block_size)) if i < n]
    slots = torch.tensor(slots)
    k = torch.randn(len(slots), kv_heads, head_dim, generator=gen).to(dtype)
    v = torch.randn(len(slots), kv_heads, head_dim, generator=gen).to(dtype)
    meta = StepMetadata.build(list(range(len(seq_lens))), seq_lens, query_lens, "cpu", tables, block_size)
    new = torch.cat([torch.arange(s - n, s) + sum(seq_lens[:i]) for i, (s, n) in enumerate(zip(seq_lens, query_lens))])
    old = torch.ones(len(slots), dtype=torch.bool)
    old[new] = False
    cache.store(0, k[old], v[old], slots[old])                    # the cached context, then the step's writes
    cache.write(0, k[new], v[new], meta)
    q = torch.randn(meta.num_tokens, kv_heads * group, head_dim, generator=gen).to(dtype)
    out = cache.attend(0, q, meta)
    ref = paged_attention_float64(q, cache.k_caches[0], cache.v_caches[0], meta.block_tables, meta.seq_lens_tensor,
                                  meta.query_start_loc, cache.scale)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
