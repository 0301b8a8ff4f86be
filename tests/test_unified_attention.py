"""The unified paged-attention kernel and the one ``paged_attention`` dispatch, against float64.

Every run writes into an output poisoned with NaN, over a cache whose unwritten slots are NaN
and whose unused block-table entries are -1. Batches mix query lengths 0, 1 and many, contexts
that are not multiples of the block size, blocks that are not powers of two (3, 5, 6, 12) and
GQA groups of 1, 3 and 4, and prefix hits that end in the middle of a block.

In the interpreter (a CPU) the unified kernel picks its tile from the longest query, up to
128 rows, with 32 keys per loop iteration (``unified_config``): a test batch is then a few
dozen programs, and the whole file runs in well under a minute on one core. On CUDA the
same tests run compiled with the GPU tiles (64 rows x 64 keys).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pagedkv_edu.attention as attention
from pagedkv_edu import runtime
from pagedkv_edu.attention import kernel_name, paged_attention, paged_attention_float64
from pagedkv_edu.model.paged_batch import random_paged_step
from pagedkv_edu.attention.triton_unified import unified_attention_triton, unified_config

DEVICE = runtime.device()
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {FP32: 2e-5, FP16: 3e-3, BF16: 2.5e-2}


def run(step, backend="triton", **kwargs) -> torch.Tensor:
    out = torch.full_like(step.q, float("nan"))
    result = paged_attention(*step.args(), backend=backend, out=out, **kwargs)
    assert result.data_ptr() == out.data_ptr()
    return out


def assert_matches_float64(step, out: torch.Tensor, dtype: torch.dtype = FP32) -> None:
    ref = paged_attention_float64(*step.args())
    assert out.dtype == dtype and out.shape == step.q.shape
    assert torch.isfinite(out).all(), "the kernel read a poisoned slot or left output rows unwritten"
    torch.testing.assert_close(out.double(), ref, atol=TOL[dtype], rtol=TOL[dtype])


def oracle(step) -> torch.Tensor:
    """Softmax attention spelled out in float64 over each sequence's contiguous K/V (no paging, no SDPA)."""
    b = step.batch
    group = step.q.shape[1] // b.k_cache.shape[2]
    out = torch.zeros(step.q.shape, dtype=torch.float64)
    starts = step.query_start_loc.tolist()
    for s, n in enumerate(step.query_lens):
        length = int(b.seq_lens[s])
        k = b.keys[s].double().cpu().repeat_interleave(group, dim=1)  # [L, H, D]
        v = b.values[s].double().cpu().repeat_interleave(group, dim=1)
        for i in range(n):
            pos = length - n + i
            q = step.q[starts[s] + i].double().cpu()  # [H, D]
            scores = torch.einsum("hd,lhd->hl", q, k[: pos + 1]) / math.sqrt(q.shape[-1])
            out[starts[s] + i] = torch.einsum("hl,lhd->hd", scores.softmax(-1), v[: pos + 1])
    return out


# --- the reference ------------------------------------------------------------------------------

def test_float64_reference_equals_spelled_out_softmax() -> None:
    # Decode, prompt, prefix-hit rest and empty sequences, GQA 3, block 5.
    step = random_paged_step([1, 7, 23, 12, 9], [1, 7, 10, 0, 1], 5, 6, 2, 8, device=DEVICE, seed=3)
    torch.testing.assert_close(paged_attention_float64(*step.args()).cpu(), oracle(step), atol=1e-12, rtol=1e-12)
    # The all-decode path of the reference is the batched decode reference: same answer.
    decode = random_paged_step([1, 4, 11], [1, 1, 1], 3, 4, 4, 8, device=DEVICE, seed=4)
    torch.testing.assert_close(paged_attention_float64(*decode.args()).cpu(), oracle(decode), atol=1e-12, rtol=1e-12)


def test_torch_backend_matches_float64() -> None:
    step = random_paged_step([17, 5, 30], [17, 2, 1], 6, 8, 2, 16, device=DEVICE, seed=5)
    assert_matches_float64(step, run(step, "torch"))


# --- the unified kernel -------------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [3, 5, 6, 12, 16])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (6, 2), (8, 2)])  # GQA groups 1, 3, 4
def test_mixed_batch_matches_float64(block_size: int, num_heads: int, num_kv_heads: int) -> None:
    b = block_size
    # prompt of B+1, prefix hit ending mid-block (context B+2, 5 new), decode at 2B+1, an empty
    # sequence, a long chunk whose context is not a multiple of B, and a decode of length 1.
    seq_lens = [b + 1, b + 7, 2 * b + 1, b, 45, 1]
    query_lens = [b + 1, 5, 1, 0, 20, 1]
    step = random_paged_step(seq_lens, query_lens, b, num_heads, num_kv_heads, 24, device=DEVICE, seed=b)
    assert kernel_name(query_lens, "triton") == "triton-unified"
    assert_matches_float64(step, run(step))


@pytest.mark.parametrize("dtype", [FP16, BF16])
def test_half_precision_matches_float64(dtype: torch.dtype) -> None:
    step = random_paged_step([33, 9, 20], [33, 1, 7], 16, 8, 2, 64, dtype, device=DEVICE, seed=7)
    assert_matches_float64(step, run(step), dtype)


def test_prefix_hit_ending_mid_block_equals_the_whole_prompt() -> None:
    # The rest of a prompt after a 13-token prefix hit (block 8: the hit ends inside block 1)
    # must give exactly the rows the whole prompt gives for those positions.
    whole = random_paged_step([29], [29], 8, 4, 2, 16, device=DEVICE, seed=11)
    rest = random_paged_step([29], [16], 8, 4, 2, 16, device=DEVICE, seed=11)
    rest.q = whole.q[13:].clone()
    out_whole, out_rest = run(whole), run(rest)
    assert_matches_float64(rest, out_rest)
    torch.testing.assert_close(out_rest, out_whole[13:], atol=TOL[FP32], rtol=TOL[FP32])


def test_unified_kernel_also_handles_pure_decode() -> None:
    step = random_paged_step([1, 5, 40], [1, 1, 1], 5, 12, 4, 20, device=DEVICE, seed=13)
    out = torch.full_like(step.q, float("nan"))
    unified_attention_triton(*step.args(), 1 / math.sqrt(20), out)
    assert_matches_float64(step, out)
    torch.testing.assert_close(out, run(step), atol=TOL[FP32], rtol=TOL[FP32])


def test_small_tiles_walk_many_query_tiles_and_key_tiles() -> None:
    # 8 rows (2 tokens x GQA 4) and 16 keys per tile: many query tiles per sequence, each
    # starting mid-sequence, and many key tiles; on a GPU the tile must stay >= 16 for tl.dot.
    step = random_paged_step([37, 3, 26], [30, 3, 9], 6, 8, 2, 16, device=DEVICE, seed=17)
    gpu = runtime.BACKEND == "cuda"
    config = unified_config(4, 16, FP32, block_m=16 if gpu else 8, tile_n=16)
    assert_matches_float64(step, run(step, config=config))


def test_scale_is_used() -> None:
    step = random_paged_step([9, 4], [9, 2], 4, 4, 4, 8, device=DEVICE, seed=19)
    out = run(step, scale=0.3)
    ref = paged_attention_float64(*step.args(), scale=0.3)
    torch.testing.assert_close(out.double(), ref, atol=TOL[FP32], rtol=TOL[FP32])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_mixed_batches(data) -> None:
    block_size = data.draw(st.sampled_from([3, 5, 6, 12, 16]), label="block_size")
    group = data.draw(st.sampled_from([1, 3, 4]), label="group")
    num_kv_heads = data.draw(st.integers(1, 2), label="num_kv_heads")
    head_dim = data.draw(st.sampled_from([8, 12, 32]), label="head_dim")
    seq_lens = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=4), label="seq_lens")
    query_lens = [data.draw(st.sampled_from(sorted({0, 1, n, max(0, n - block_size // 2)})), label="q_len")
                  for n in seq_lens]
    step = random_paged_step(seq_lens, query_lens, block_size, group * num_kv_heads, num_kv_heads, head_dim,
                             device=DEVICE, seed=data.draw(st.integers(0, 99), label="seed"))
    assert_matches_float64(step, run(step))


def test_no_queries_at_all_is_a_no_op() -> None:
    step = random_paged_step([5, 3], [0, 0], 4, 4, 2, 8, device=DEVICE)
    assert run(step).shape == (0, 4, 8)


# --- the dispatch -------------------------------------------------------------------------------

def test_kernel_names() -> None:
    assert kernel_name([1, 1, 1], "triton") == "triton-decode"
    assert kernel_name(torch.tensor([1, 7]), "triton") == "triton-unified"
    assert kernel_name([0, 2], "triton") == "triton-unified"
    assert kernel_name([1, 1], "torch") == kernel_name([5], "torch") == "torch-gather"

    def my_kernel(*args):
        raise AssertionError("kernel_name must not call the backend")

    assert kernel_name([1], my_kernel) == "custom:my_kernel"
    with pytest.raises(ValueError, match="'cuda'"):
        kernel_name([1], "cuda")


LAUNCHER_NAMES = {"paged_decode_attention_triton": "triton-decode", "unified_attention_triton": "triton-unified"}


@pytest.fixture
def spy(monkeypatch):
    """Record which Triton launcher the dispatch calls."""
    calls = []
    for name in ("paged_decode_attention_triton", "unified_attention_triton"):
        real = getattr(attention, name)
        monkeypatch.setattr(attention, name,
                            lambda *a, _real=real, _name=name, **k: (calls.append(_name), _real(*a, **k))[1])
    return calls


@pytest.mark.parametrize("query_lens,expected", [
    ([1, 1, 1], "paged_decode_attention_triton"),
    ([1, 4, 1], "unified_attention_triton"),
    ([0, 2, 1], "unified_attention_triton"),  # as many tokens as sequences, yet not a decode step
])
@pytest.mark.parametrize("check", [True, False])
def test_dispatch_chooses_the_kernel(spy, query_lens, expected, check) -> None:
    step = random_paged_step([6, 9, 4], query_lens, 4, 4, 2, 8, device=DEVICE, seed=23)
    out = run(step, check=check)
    assert spy == [expected]
    assert kernel_name(query_lens, "triton") == LAUNCHER_NAMES[expected]
    assert_matches_float64(step, out)


def test_callable_backend_gets_validated_inputs_and_its_answer_is_returned() -> None:
    step = random_paged_step([6, 9], [6, 1], 4, 4, 2, 8, device=DEVICE, seed=29)
    seen = []

    def reader_kernel(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale):
        seen.append(scale)
        return attention.paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale)

    assert_matches_float64(step, run(step, reader_kernel))
    assert seen == [pytest.approx(1 / math.sqrt(8))]
    too_long = step.query_start_loc.clone()
    too_long[1:] += 1  # sequence 0 now brings 7 queries for 6 tokens
    q = torch.cat([step.q, step.q[:1]])
    with pytest.raises(ValueError, match="brings 7 queries but seq_lens\\[0\\] = 6"):
        paged_attention(q, *step.args()[1:5], too_long, backend=reader_kernel)
    assert len(seen) == 1, "a custom backend must not be called on bad input"

    def wrong_shape(q, *args):
        return q[:1]

    with pytest.raises(ValueError, match="custom:wrong_shape returned"):
        paged_attention(*step.args(), backend=wrong_shape)


# --- bad input: a clear error before any launch, the output untouched ---------------------------

def _bad_inputs():
    """(name, edit, message) triples: ``edit(args)`` breaks a valid step's arguments."""
    def with_(i, value):
        return lambda a: (*a[:i], value(a[i]), *a[i + 1:])

    def set_(t, index, value):
        t = t.clone()
        t[index] = value
        return t

    return [
        ("query longer than its sequence", with_(4, lambda s: set_(s, 0, 3)), r"sequence 0 brings 5 queries but seq_lens\[0\] = 3"),
        ("negative query length", with_(5, lambda s: set_(s, 1, 7)), r"query length of sequence 1 is negative"),
        ("negative seq_len", with_(4, lambda s: set_(s, 2, -2)), r"seq_lens\[2\] = -2 is negative"),
        ("table too short", with_(3, lambda t: t[:, :2]), r"block table too short: seq_lens\[1\] = 9"),
        ("table names no block", with_(3, lambda t: set_(t, (1, 2), 999)), r"block_tables\[1, 2\] = 999"),
        ("qsl does not cover q", with_(5, lambda s: set_(s, 3, 8)), r"query_start_loc\[-1\] = 8 but q holds 7 tokens"),
        ("qsl does not start at 0", with_(5, lambda s: set_(s, 0, 1)), r"query_start_loc\[0\] = 1"),
        ("qsl wrong length", with_(5, lambda s: s[:-1]), r"query_start_loc 3 entries \(needs num_seqs \+ 1 = 4\)"),
        ("float seq_lens", with_(4, lambda s: s.float()), r"seq_lens must be an int32 \(or int64\) tensor"),
        ("float64 q and cache", lambda a: (a[0].double(), a[1].double(), a[2].double(), *a[3:]),
         r"k_cache has dtype torch.float64"),
        ("q dtype differs", with_(0, lambda q: q.half()), r"q has dtype torch.float16 but the cache has dtype torch.float32"),
        ("q head_dim differs", with_(0, lambda q: q[..., :6]), r"q has head_dim 6 but the cache has head_dim 8"),
        ("GQA not integral", with_(0, lambda q: q[:, :3]), r"num_heads=3 is not a positive multiple of num_kv_heads=2"),
    ]


@pytest.mark.parametrize("name,edit,message", _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_bad_input_raises_before_launch(spy, name, edit, message, backend) -> None:
    step = random_paged_step([5, 9, 4], [5, 1, 1], 4, 4, 2, 8, device=DEVICE, seed=31)
    args = edit(step.args())
    out = torch.full(args[0].shape, 7.0, dtype=args[0].dtype, device=args[0].device)
    with pytest.raises(ValueError, match=message):
        paged_attention(*args, backend=backend, out=out)
    assert spy == [], "a kernel was launched on bad input"
    assert bool((out == 7.0).all()), "the output buffer was written on bad input"


def test_head_dim_the_kernels_cannot_handle_is_refused_before_launch(spy) -> None:
    step = random_paged_step([3], [3], 4, 2, 1, 272, device=DEVICE, seed=37)
    out = torch.full_like(step.q, 7.0)
    with pytest.raises(ValueError, match="head_dim 272 is larger than the Triton kernels handle"):
        paged_attention(*step.args(), out=out)
    assert spy == [] and bool((out == 7.0).all())
    assert_matches_float64(step, run(step, "torch"))  # the reference has no such limit


def test_bad_out_and_backend_are_refused() -> None:
    step = random_paged_step([5], [5], 4, 4, 2, 8, device=DEVICE)
    with pytest.raises(ValueError, match="out must match q"):
        paged_attention(*step.args(), out=torch.empty(5, 4, 4, device=DEVICE))
    with pytest.raises(ValueError, match="unknown attention backend 'cuda'"):
        paged_attention(*step.args(), backend="cuda")


# --- the KV store: one call per step, and a record of what ran ----------------------------------

def tiny_llama(seed: int = 0):
    """A one-layer random Llama with GQA 3 and head_dim 12 (built here: no transformers import)."""
    from pagedkv_edu.model.llama import Llama, LlamaConfig

    config = LlamaConfig(vocab_size=300, hidden_size=48, intermediate_size=64, num_layers=1, num_heads=6,
                         num_kv_heads=2, head_dim=12, rms_norm_eps=1e-5, rope_theta=10000.0,
                         max_position_embeddings=128, tie_word_embeddings=True)
    g = torch.Generator().manual_seed(seed)
    h, qd, kvd, ff = 48, 6 * 12, 2 * 12, 64

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    p = "model.layers.0."
    state = {p + "input_layernorm.weight": torch.ones(h), p + "post_attention_layernorm.weight": torch.ones(h),
             p + "self_attn.q_proj.weight": w(qd, h), p + "self_attn.k_proj.weight": w(kvd, h),
             p + "self_attn.v_proj.weight": w(kvd, h), p + "self_attn.o_proj.weight": w(h, qd),
             p + "mlp.gate_proj.weight": w(ff, h), p + "mlp.up_proj.weight": w(ff, h),
             p + "mlp.down_proj.weight": w(h, ff), "model.embed_tokens.weight": w(300, h),
             "model.norm.weight": torch.ones(h)}
    return Llama.from_state_dict(config, {k: v.to(DEVICE) for k, v in state.items()})


def test_store_runs_every_step_through_one_call_and_records_the_kernels(monkeypatch) -> None:
    from pagedkv_edu.engine.generate import generate
    from pagedkv_edu.attention import kv_cache
    from pagedkv_edu.attention.kv_cache import PagedKVCache

    tiny = tiny_llama()
    calls = []
    real = kv_cache.paged_attention
    monkeypatch.setattr(kv_cache, "paged_attention", lambda *a, **k: (calls.append(a[5].tolist()), real(*a, **k))[1])
    prompts = [[11, 12, 13, 14, 15], [21, 22, 23, 24, 25, 26, 27, 28, 29]]

    def run_with(backend):
        store = PagedKVCache.for_model(tiny.config, 16, 3, dtype=tiny.dtype, device=tiny.device, backend=backend)
        return store, generate(tiny, prompts, 3, store=store, record_logits=True)

    torch_store, torch_run = run_with("torch")
    assert torch_store.kernels == {"prefill": "torch-gather", "decode": "torch-gather"}
    assert calls == []  # the torch reference gathers with indices planned once per step, not per call

    triton_store, triton_run = run_with("triton")
    assert triton_store.kernels == {"prefill": "triton-unified", "decode": "triton-decode"}
    assert calls[0] == [0, 5, 14] and calls[-1] == [0, 1, 2]  # prefill packed end to end, then decode
    assert len(calls) == 3 * tiny.config.num_layers  # one call per layer per step, prefill included

    def reader_kernel(*args):
        return attention.paged_attention_torch(*args)

    custom_store, custom_run = run_with(reader_kernel)
    assert custom_store.kernels == {"prefill": "custom:reader_kernel", "decode": "custom:reader_kernel"}
    assert torch_run.tokens == triton_run.tokens == custom_run.tokens
    for a, b in zip(torch_run.step_logits, triton_run.step_logits):
        assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="unknown attention backend 'cuda'"):
        PagedKVCache.for_model(tiny.config, 16, 3, backend="cuda")


def test_step_metadata_carries_query_start_loc() -> None:
    from pagedkv_edu.attention.kv_cache import StepMetadata

    meta = StepMetadata.build(["a", "b", "c"], [7, 3, 10], [7, 1, 4], torch.device("cpu"))
    assert meta.query_start_loc.dtype == torch.int32
    assert meta.query_start_loc.tolist() == [0, 7, 8, 12]
