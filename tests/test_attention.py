"""Paged decode attention and slot-mapped stores, checked against float64 and SDPA oracles.

Every kernel run writes into an output poisoned with NaN, over a cache whose unwritten slots
are NaN and whose unused block-table entries are -1: reading anything it should not makes a
test fail. Each batch mixes the lengths that break paging code: 1, B-1, B, B+1 and "long".
Shapes are small because on a CPU the kernels run in the Triton interpreter; the same tests
run compiled on CUDA (``runtime.device()``).
"""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu import runtime
from pagedkv_edu.attention import (
    gather_kv,
    paged_decode_attention,
    paged_decode_attention_float64,
    sdpa_decode_attention,
    store_kv,
)
from pagedkv_edu.model.paged_batch import random_paged_batch
from pagedkv_edu.attention.triton_decode import MAX_SPLITS, choose_num_splits, launch_config, splits_for

DEVICE = runtime.device()
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
# atol = rtol per dtype: fp32 accumulates exactly enough; fp16/bf16 round q.k, p and the output.
TOL = {FP32: 2e-5, FP16: 3e-3, BF16: 2.5e-2}


def lengths(block_size: int, long: int = 300) -> list[int]:
    """1, B-1, B, B+1 and a long sequence (B-1 dropped when it would be 0)."""
    return sorted({1, max(1, block_size - 1), block_size, block_size + 1, long})


def assert_matches_float64(batch, out: torch.Tensor, dtype: torch.dtype, scale: float | None = None) -> None:
    ref = paged_decode_attention_float64(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                         scale)
    assert out.dtype == dtype and out.shape == batch.q.shape
    assert torch.isfinite(out).all(), "the kernel read a poisoned slot or left output unwritten"
    torch.testing.assert_close(out.double(), ref, atol=TOL[dtype], rtol=TOL[dtype])


def run_triton(batch, num_splits=None, scale=None, config=None) -> torch.Tensor:
    out = torch.full_like(batch.q, float("nan"))
    result = paged_decode_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                    scale=scale, num_splits=num_splits, out=out, config=config)
    assert result.data_ptr() == out.data_ptr()
    return out


# --- the reference against the contiguous oracle ------------------------------------------------

@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (9, 3), (8, 2)])
def test_gather_reference_equals_contiguous_sdpa(num_heads: int, num_kv_heads: int) -> None:
    batch = random_paged_batch(lengths(16), 16, num_heads, num_kv_heads, 64, device=DEVICE, seed=1)
    for i, n in enumerate(batch.seq_lens.tolist()):  # the gather undoes the paging exactly
        assert torch.equal(gather_kv(batch.k_cache, batch.block_tables[i], n), batch.keys[i])
        assert torch.equal(gather_kv(batch.v_cache, batch.block_tables[i], n), batch.values[i])
    paged = paged_decode_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                   backend="torch")
    oracle = sdpa_decode_attention(batch.q, batch.keys, batch.values)
    torch.testing.assert_close(paged, oracle, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [FP32, FP16, BF16])
def test_torch_backend_within_dtype_tolerance(dtype: torch.dtype) -> None:
    batch = random_paged_batch(lengths(8), 8, 8, 2, 64, dtype, DEVICE, seed=2)
    out = paged_decode_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                 backend="torch", out=torch.full_like(batch.q, float("nan")))
    assert_matches_float64(batch, out, dtype)


# --- the Triton kernel against float64 -------------------------------------------------------

@pytest.mark.parametrize("block_size", [1, 2, 4, 8, 16, 32, 64, 128])
def test_kernel_every_power_of_two_block_size(block_size: int) -> None:
    batch = random_paged_batch(lengths(block_size, long=260), block_size, 4, 1, 64, device=DEVICE,
                               seed=block_size)
    assert_matches_float64(batch, run_triton(batch), FP32)


@pytest.mark.parametrize("dtype", [FP32, FP16, BF16])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (3, 1), (8, 2)])
def test_kernel_dtypes_and_gqa_ratios(dtype: torch.dtype, num_heads: int, num_kv_heads: int) -> None:
    """GQA ratios 1, 3 and 4 (Llama-3.2-1B's 32/8 shrunk to 8/2 for the interpreter)."""
    batch = random_paged_batch(lengths(16), 16, num_heads, num_kv_heads, 64, dtype, DEVICE, seed=num_heads)
    assert_matches_float64(batch, run_triton(batch), dtype)


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_kernel_smollm2_heads(dtype: torch.dtype) -> None:
    """SmolLM2-135M's attention shape: 9 query heads over 3 KV heads, head_dim 64."""
    batch = random_paged_batch([1, 15, 16, 17, 230], 16, 9, 3, 64, dtype, DEVICE, seed=9)
    assert_matches_float64(batch, run_triton(batch), dtype)


@pytest.mark.parametrize("head_dim", [128, 80, 24])
def test_kernel_head_dims(head_dim: int) -> None:
    """64 is covered above; 128 is Llama-2-7B's; 80 and 24 are not powers of two (masked)."""
    batch = random_paged_batch(lengths(16, long=100), 16, 4, 1, head_dim, FP16, DEVICE, seed=head_dim)
    assert_matches_float64(batch, run_triton(batch), FP16)


@pytest.mark.parametrize("num_splits,dtype", [(1, FP32), (2, BF16), (3, FP32), (8, FP16)])
def test_split_k_forced(num_splits: int, dtype: torch.dtype) -> None:
    """Split-K on and off agree; with 8 splits the short sequences leave later splits empty."""
    batch = random_paged_batch([1, 17, 333], 16, 4, 1, 64, dtype, DEVICE, seed=num_splits)
    assert_matches_float64(batch, run_triton(batch, num_splits=num_splits), dtype)


def test_strided_inputs() -> None:
    """q, seq_lens and block tables that are views into larger tensors, not fresh contiguous copies."""
    batch = random_paged_batch([5, 40, 1], 8, 4, 2, 32, device=DEVICE, seed=5)
    q = torch.cat([batch.q, batch.q], dim=-1)[..., :32]  # last dim strided by 64
    seq_lens = torch.stack([batch.seq_lens, batch.seq_lens], dim=1)[:, 0]  # stride 2
    out = torch.full_like(batch.q, float("nan"))
    paged_decode_attention(q, batch.k_cache, batch.v_cache, batch.block_tables, seq_lens, out=out)
    assert_matches_float64(batch, out, FP32)


def test_custom_scale_and_wide_unused_table() -> None:
    batch = random_paged_batch(lengths(4, long=40), 4, 6, 2, 32, device=DEVICE, seed=7, table_width=20,
                               table_fill=10**6)
    assert_matches_float64(batch, run_triton(batch, scale=0.3), FP32, scale=0.3)


@pytest.mark.parametrize("dtype", [FP32, FP16])
def test_gpu_tile_config_in_any_backend(dtype: torch.dtype) -> None:
    """The GPU's padded tiles (GQA group and head_dim >= 16, 64 tokens) are correct too.

    On a CPU this runs the GPU's tile shapes in the interpreter (bf16 is excluded there: the
    interpreter's tl.dot mishandles bf16, which is why the CPU config computes dots in fp32).
    """
    batch = random_paged_batch([1, 16, 17, 150], 16, 6, 2, 40, dtype, DEVICE, seed=11)
    config = launch_config(3, 40, dtype, gpu=True)
    assert config.group_pad == 16 and config.head_dim_pad == 64 and config.tile_n == 64
    assert_matches_float64(batch, run_triton(batch, num_splits=2, config=config), dtype)


def test_auto_splits_policy() -> None:
    """Split only when programs cannot fill the GPU, never below 512 tokens, never on a CPU."""
    assert splits_for(programs=8, num_sms=132, max_len=32768) == 33
    assert splits_for(programs=8, num_sms=132, max_len=2048) == 4
    assert splits_for(programs=512, num_sms=132, max_len=4096) == 1
    assert splits_for(programs=1, num_sms=132, max_len=10**6) == MAX_SPLITS
    assert splits_for(programs=8, num_sms=132, max_len=100) == 1
    assert choose_num_splits(1, 8, 32768, torch.device("cpu")) == 1


# --- the store ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [FP32, FP16, BF16])
@pytest.mark.parametrize("num_tokens", [1, 5, 300])
def test_store_kernel_matches_torch_store(dtype: torch.dtype, num_tokens: int) -> None:
    """Decode (one token per sequence: few tokens) and prefill (many), with -1 padding skipped."""
    gen = torch.Generator().manual_seed(num_tokens)
    num_blocks, block_size, num_kv_heads, head_dim = 40, 16, 3, 24
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[torch.rand(num_tokens, generator=gen) < 0.2] = -1
    k = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(DEVICE)
    v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype).to(DEVICE)
    slots = slots.to(torch.int32).to(DEVICE)
    caches = {}
    for backend in ("torch", "triton"):
        kc = torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)
        vc = torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)
        store_kv(k, v, kc, vc, slots, backend=backend)
        caches[backend] = (kc, vc)
    for i in range(2):
        assert torch.equal(caches["torch"][i].isnan(), caches["triton"][i].isnan())
        assert torch.equal(caches["torch"][i].nan_to_num(), caches["triton"][i].nan_to_num())
    written = slots[slots >= 0].long()
    flat_k = caches["triton"][0].view(-1, num_kv_heads, head_dim)
    assert torch.equal(flat_k[written], k[slots >= 0])
    assert int(caches["triton"][0].isnan().any(-1).any(-1).sum()) == num_blocks * block_size - written.numel()


def test_store_kernel_reads_strided_inputs() -> None:
    """K and V usually come out of one fused projection: views with a row stride, not copies."""
    kv = torch.randn(7, 2, 4, 32).to(DEVICE)  # [tokens, K|V, heads, dim]
    k, v = kv[:, 0], kv[:, 1]
    kc = torch.zeros(4, 8, 4, 32, device=DEVICE)
    vc = torch.zeros_like(kc)
    slots = torch.tensor([3, 9, -1, 0, 31, 17, 8], dtype=torch.int32, device=DEVICE)
    store_kv(k, v, kc, vc, slots, backend="triton")
    flat = kc.view(-1, 4, 32)
    assert torch.equal(flat[slots[slots >= 0].long()], k[slots >= 0])
    assert torch.equal(vc.view(-1, 4, 32)[31], v[4])


# --- errors, raised before any launch --------------------------------------------------------

def _decode_args(**change):
    batch = random_paged_batch([5, 9], 4, 4, 2, 16, device=DEVICE, seed=3, table_width=4)
    args = dict(q=batch.q, k_cache=batch.k_cache, v_cache=batch.v_cache, block_tables=batch.block_tables,
                seq_lens=batch.seq_lens)
    args.update(change)
    return args


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("change,message", [
    (lambda a: {"block_tables": a["block_tables"].index_fill(1, torch.tensor([0], device=DEVICE), 99)},
     r"block_tables\[0, 0\] = 99 is not a block"),
    (lambda a: {"block_tables": a["block_tables"].index_fill(1, torch.tensor([1], device=DEVICE), -1)},
     r"block_tables\[0, 1\] = -1"),
    (lambda a: {"seq_lens": torch.tensor([5, 17], dtype=torch.int32, device=DEVICE)},
     r"seq_lens\[1\] = 17 exceeds the block table's capacity of 4 blocks x block_size 4 = 16"),
    (lambda a: {"seq_lens": torch.tensor([5, 0], dtype=torch.int32, device=DEVICE)}, r"seq_lens\[1\] = 0"),
    (lambda a: {"q": a["q"].half()}, r"q has dtype torch.float16 but the cache has dtype torch.float32"),
    (lambda a: {"v_cache": a["v_cache"].half()}, r"k_cache dtype torch.float32 != v_cache dtype torch.float16"),
    (lambda a: {"q": a["q"][:, :3]}, r"num_heads=3 is not a positive multiple of num_kv_heads=2"),
    (lambda a: {"q": a["q"][..., :8]}, r"q has head_dim 8 but the cache has head_dim 16"),
    (lambda a: {"q": a["q"][0]}, r"q must be a 3-d tensor"),
    (lambda a: {"k_cache": a["k_cache"][:-1]}, r"k_cache shape .* != v_cache shape"),
    (lambda a: {"block_tables": a["block_tables"].float()}, r"block_tables must be an int32"),
    (lambda a: {"seq_lens": a["seq_lens"][:1]}, r"batch sizes disagree"),
    (lambda a: {"k_cache": a["k_cache"].double(), "v_cache": a["v_cache"].double()}, r"dtype torch.float64"),
    (lambda a: {"k_cache": a["k_cache"].transpose(1, 2)}, r"must be contiguous"),
])
def test_decode_rejects_bad_input_before_launch(backend, change, message) -> None:
    args = _decode_args()
    args.update(change(args))
    out = torch.full((2, 4, 16), float("nan"), device=DEVICE)
    if args["q"].shape != out.shape or args["q"].dtype != out.dtype:
        out = None
    with pytest.raises(ValueError, match=message):
        paged_decode_attention(**args, backend=backend, out=out)
    if out is not None:
        assert out.isnan().all(), "nothing may be written before the error"


def test_decode_rejects_device_mismatch() -> None:
    other = "meta"
    args = _decode_args()
    with pytest.raises(ValueError, match=r"block_tables is on meta but the cache is on"):
        paged_decode_attention(**(args | {"block_tables": args["block_tables"].to(other)}))
    with pytest.raises(ValueError, match=r"q is on meta"):
        paged_decode_attention(**(args | {"q": args["q"].to(other)}))


def test_decode_rejects_bad_options() -> None:
    args = _decode_args()
    with pytest.raises(ValueError, match=r"unknown attention backend 'cuda'"):
        paged_decode_attention(**args, backend="cuda")
    with pytest.raises(ValueError, match=rf"num_splits must be None or an integer in 1..{MAX_SPLITS}, got 0"):
        paged_decode_attention(**args, num_splits=0)
    with pytest.raises(ValueError, match=r"out must match q"):
        paged_decode_attention(**args, out=torch.empty(2, 4, 8, device=DEVICE))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_store_rejects_bad_input_before_writing(backend: str) -> None:
    kc = torch.zeros(4, 8, 2, 16, device=DEVICE)
    vc = torch.zeros_like(kc)
    k = torch.randn(3, 2, 16, device=DEVICE)
    good = torch.tensor([0, 5, -1], dtype=torch.int32, device=DEVICE)
    cases = [
        (dict(slot_mapping=torch.tensor([0, 32, 1], dtype=torch.int32, device=DEVICE)),
         r"slot_mapping\[1\] = 32 is outside the cache's 32 slots"),
        (dict(slot_mapping=torch.tensor([0, -2, 1], dtype=torch.int32, device=DEVICE)), r"slot_mapping\[1\] = -2"),
        (dict(slot_mapping=torch.tensor([4, 4, 1], dtype=torch.int32, device=DEVICE)), r"slot 4 appears 2 times"),
        (dict(slot_mapping=good[:2]), r"slot_mapping has 2 entries for 3 tokens"),
        (dict(slot_mapping=good.float()), r"slot_mapping must be an int32"),
        (dict(k=k.half()), r"k has dtype torch.float16 but the cache has dtype torch.float32"),
        (dict(k=torch.randn(3, 4, 8, device=DEVICE)), r"k has shape \(3, 4, 8\), but the cache holds"),
        (dict(v=k[:2]), r"k shape \(3, 2, 16\) != v shape \(2, 2, 16\)"),
        (dict(k_cache=kc.half()), r"k_cache dtype torch.float16 != v_cache dtype torch.float32"),
    ]
    for change, message in cases:
        args = dict(k=k, v=k.clone(), k_cache=kc, v_cache=vc, slot_mapping=good) | change
        with pytest.raises(ValueError, match=message):
            store_kv(**args, backend=backend)
        assert not kc.any() and not vc.any(), f"the cache changed before the error {message!r}"


def test_interpreter_cast_to_bf16_truncates_within_one_spacing() -> None:
    """Chapter 5's bound: the interpreter truncates (up to 2^-7); compiled code rounds to nearest (2^-8)."""
    from pagedkv_edu import runtime
    from pagedkv_edu.bench import bf16_check

    cast = bf16_check.cast_error(n=1024, seed=3)
    assert cast.torch_max_relative <= bf16_check.BF16_UNIT
    assert cast.max_relative <= bf16_check.TRUNCATION_BOUND == 2 ** -7
    if runtime.BACKEND == "cuda":
        assert cast.differ == 0
    else:
        assert cast.differ > cast.n // 4 and cast.max_relative > bf16_check.BF16_UNIT


def test_no_overflow_checks_is_scoped_and_changes_no_result() -> None:
    from pagedkv_edu import runtime
    from pagedkv_edu.attention.interpreter import no_overflow_checks
    from pagedkv_edu.model.paged_batch import random_paged_batch

    b = random_paged_batch([1, 17, 40], 5, 4, 2, 8, seed=1)
    args = (b.q, b.k_cache, b.v_cache, b.block_tables, b.seq_lens)
    if runtime.BACKEND != "cuda":
        from triton.runtime import interpreter
        device_call = interpreter.InterpretedFunction.__call__
    with no_overflow_checks():
        fast = paged_decode_attention(*args)
        if runtime.BACKEND != "cuda":
            assert interpreter.interpreter_builder.options.sanitize_overflow is False
            assert interpreter.InterpretedFunction.__call__ is not device_call
    if runtime.BACKEND != "cuda":
        assert interpreter.interpreter_builder.options.sanitize_overflow is True
        assert interpreter.InterpretedFunction.__call__ is device_call
    assert torch.equal(fast, paged_decode_attention(*args))
