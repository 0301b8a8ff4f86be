"""``bench attention``: the decode kernel against memory bandwidth, contiguous SDPA and the gather reference (chapter 4).

On CUDA, per configuration: ``do_bench`` median time, K/V GB/s and its fraction of the copy
bandwidth measured in the same run, and speed against SDPA over a contiguous cache holding the
same K/V. Shapes are one layer of Llama-3.2-1B in bf16; on a CPU (the interpreter) small shapes,
which say nothing about GPU speed. ``--mode prefill`` times the unified kernel instead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass, replace
from collections.abc import Callable
from typing import Any

import torch

from .. import runtime
from ..specs import DTYPE_BYTES, kv_bytes_per_token, torch_dtype
from . import add_out_flag, emit, heading, metadata



@dataclass(frozen=True)
class Shape:
    """One benchmark configuration: a decode step of ``batch`` sequences of ``context`` tokens."""

    label: str
    batch: int
    context: int
    block_size: int = 16
    num_splits: int | None = None  # None = automatic
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 64
    dtype: str = "bf16"

    @property
    def kv_bytes(self) -> int:
        """K and V bytes one decode step reads."""
        return self.batch * self.context * kv_bytes_per_token(1, self.num_kv_heads, self.head_dim, DTYPE_BYTES[self.dtype])


MAIN = Shape("target: b64 x 4096", 64, 4096)
LONG_NO_SPLIT = Shape("b1 x 32768, no split", 1, 32768, num_splits=1)
LONG_AUTO = Shape("b1 x 32768, auto split", 1, 32768)

GPU_SHAPES: tuple[Shape, ...] = (
    MAIN,
    replace(MAIN, label="b64 x 4096, split 2", num_splits=2),
    *(replace(MAIN, label=f"b64 x 4096, block {b}", block_size=b) for b in (1, 8, 32, 64, 128)),
    Shape("b64 x 2048", 64, 2048),
    Shape("b16 x 4096", 16, 4096),
    Shape("b8 x 8192, no split", 8, 8192, num_splits=1),
    Shape("b8 x 8192, auto split", 8, 8192),
    LONG_NO_SPLIT,
    LONG_AUTO,
    Shape("llama-2-7b: 32/32 heads, d128, fp16, b16 x 4096", 16, 4096, num_kv_heads=32, head_dim=128, dtype="fp16"),
)

CPU_SHAPES: tuple[Shape, ...] = (
    Shape("b4 x 256", 4, 256, num_heads=8, num_kv_heads=2, dtype="fp32"),
    Shape("b4 x 256, block 4", 4, 256, block_size=4, num_heads=8, num_kv_heads=2, dtype="fp32"),
    Shape("b1 x 1024, no split", 1, 1024, num_splits=1, num_heads=8, num_kv_heads=2, dtype="fp32"),
    Shape("b1 x 1024, split 4", 1, 1024, num_splits=4, num_heads=8, num_kv_heads=2, dtype="fp32"),
)

TILE_SWEEP: tuple[tuple[int, int, int], ...] = tuple(
    (tile_n, warps, stages) for tile_n in (32, 64, 128) for warps in (4, 8) for stages in (2, 3))
"""(tile_n, num_warps, num_stages) tried on the target shape, to check the kernel's defaults."""


def _time_ms(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn``: do_bench on CUDA, a few timed calls on a CPU."""
    if runtime.BACKEND == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, return_mode="median"))
    fn()  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _versus(name: str, other_ms: float, ms: float) -> dict[str, float]:
    """``{name}_ms`` and how many times faster than it the kernel's ``ms`` is (``speed_vs_{name}``)."""
    return {f"{name}_ms": round(other_ms, 5), f"speed_vs_{name}": round(other_ms / ms, 3)}


def _against_sdpa(sdpa: Callable[[], torch.Tensor], out: torch.Tensor, ms: float) -> dict[str, float]:
    """SDPA's time and speed ratio, and how far the kernel's ``out`` is from SDPA's answer."""
    diff = float((out.float() - sdpa().float()).abs().max())
    return _versus("sdpa", _time_ms(sdpa), ms) | {"max_abs_diff_vs_sdpa": diff}


def copy_bandwidth_gbps(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written (GB/s, 1e9)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=runtime.device())
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _contiguous_sdpa(batch: Any, scale: float) -> Callable[[], torch.Tensor]:
    """SDPA over a contiguous [batch, kv_heads, context, head_dim] copy of the same K/V.

    The GQA group's query heads become SDPA's query length (no mask: every query sees every
    key), so each KV head's keys are read once, as in the paged kernel.
    """
    b, h, d = batch.q.shape
    kv_heads = batch.k_cache.shape[2]
    k = torch.stack(batch.keys).transpose(1, 2).contiguous()
    v = torch.stack(batch.values).transpose(1, 2).contiguous()
    q = batch.q.view(b, kv_heads, h // kv_heads, d)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(q, k, v, scale=scale).view(b, h, d)


def measure(shape: Shape, copy_gbps: float | None, tile: tuple[int, int, int] | None = None,
            baselines: bool = True) -> dict[str, Any]:
    """Time one shape: the Triton kernel, and (with ``baselines``) contiguous SDPA and the gather reference."""
    from ..attention import paged_decode_attention
    from ..model.paged_batch import random_paged_batch
    from ..attention.triton_decode import choose_num_splits, default_scale, launch_config

    dtype = torch_dtype(shape.dtype)
    batch = random_paged_batch([shape.context] * shape.batch, shape.block_size, shape.num_heads,
                               shape.num_kv_heads, shape.head_dim, dtype, runtime.device(), seed=0, poison=False)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
    splits = shape.num_splits or choose_num_splits(shape.batch, shape.num_kv_heads, shape.context, batch.q.device)
    config = None
    if tile is not None:
        config = launch_config(shape.num_heads // shape.num_kv_heads, shape.head_dim, dtype,
                               tile_n=tile[0], num_warps=tile[1], num_stages=tile[2])
    out = torch.empty_like(batch.q)
    paged_decode_attention(*args, num_splits=splits, out=out, config=config)  # validates once, compiles
    ms = _time_ms(lambda: paged_decode_attention(*args, num_splits=splits, out=out, check=False, config=config))
    gbps = shape.kv_bytes / (ms * 1e-3) / 1e9
    row: dict[str, Any] = {
        **asdict(shape), "num_splits_used": splits, "kv_bytes": shape.kv_bytes,
        "kernel_ms": round(ms, 5), "gbps": round(gbps, 3),
        "fraction_of_copy_bw": round(gbps / copy_gbps, 3) if copy_gbps else None,
    }
    if tile is not None:
        row.update(tile_n=tile[0], num_warps=tile[1], num_stages=tile[2])
    if baselines:
        sdpa = _contiguous_sdpa(batch, default_scale(shape.head_dim))
        row.update(_against_sdpa(sdpa, out, ms))
        row.update(_versus("gather", _time_ms(lambda: paged_decode_attention(*args, backend="torch", check=False)), ms))
    return row


@dataclass(frozen=True)
class StepShape:
    """One step for ``--mode prefill``: sequence ``s`` holds ``seq_lens[s]`` tokens, the last ``query_lens[s]`` new."""

    label: str
    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]
    block_size: int = 16
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 64
    dtype: str = "bf16"

    @property
    def kind(self) -> str:
        if all(q == 1 for q in self.query_lens):
            return "decode"
        return "prefill" if self.query_lens == self.seq_lens else "mixed"

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of QK^T and PV over the keys each query sees (causal)."""
        seen = sum(q * (n - q) + q * (q + 1) // 2 for n, q in zip(self.seq_lens, self.query_lens))
        return 4 * self.num_heads * self.head_dim * seen


PREFILL_MAIN = StepShape("target: prefill 1 x 4096", (4096,), (4096,))
DECODE_VIA_UNIFIED = StepShape("decode b64 x 4096", (4096,) * 64, (1,) * 64)

PREFILL_GPU_SHAPES: tuple[StepShape, ...] = (
    PREFILL_MAIN,
    StepShape("prefill 4 x 1024", (1024,) * 4, (1024,) * 4),
    StepShape("prefill 1 x 4096, block 128", (4096,), (4096,), block_size=128),
    StepShape("prefix hit: 1 x 4096, last 1000 new", (4096,), (1000,)),
    DECODE_VIA_UNIFIED,
    StepShape("mixed: 4 chunks of 512 at 2048 + 60 decodes at 4096", (2048,) * 4 + (4096,) * 60,
              (512,) * 4 + (1,) * 60),
)

PREFILL_CPU_SHAPES: tuple[StepShape, ...] = (
    StepShape("prefill 1 x 128", (128,), (128,), num_heads=8, num_kv_heads=2, dtype="fp32"),
    StepShape("prefix hit: 1 x 128, last 40 new", (128,), (40,), num_heads=8, num_kv_heads=2, dtype="fp32"),
    StepShape("decode b4 x 128", (128,) * 4, (1,) * 4, num_heads=8, num_kv_heads=2, dtype="fp32"),
    StepShape("mixed: 2 chunks of 32 at 64 + 2 decodes at 128", (64, 64, 128, 128), (32, 32, 1, 1),
              num_heads=8, num_kv_heads=2, dtype="fp32"),
)


def _contiguous_causal_sdpa(step: Any, scale: float) -> Callable[[], torch.Tensor] | None:
    """SDPA over contiguous ``[batch, kv_heads, L, head_dim]`` K/V, for steps whose sequences all look alike.

    Every sequence's ``n`` new queries see the cached prefix and themselves causally: ``is_causal``
    when the whole sequence is new, an explicit mask otherwise. None for a ragged step.
    """
    lens, q_lens = step.batch.seq_lens.tolist(), step.query_lens
    if len(set(lens)) != 1 or len(set(q_lens)) != 1:
        return None
    length, n, b = lens[0], q_lens[0], len(lens)
    k = torch.stack(step.batch.keys).transpose(1, 2).contiguous()
    v = torch.stack(step.batch.values).transpose(1, 2).contiguous()
    q = step.q.view(b, n, *step.q.shape[1:]).transpose(1, 2).contiguous()  # [b, heads, n, head_dim]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if n == length and n > 1:
        return lambda: sdpa(q, k, v, is_causal=True, scale=scale, enable_gqa=True).transpose(1, 2).reshape(step.q.shape)
    mask = torch.arange(length, device=q.device)[None, :] <= torch.arange(length - n, length, device=q.device)[:, None]
    return lambda: sdpa(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True).transpose(1, 2).reshape(step.q.shape)


def measure_step(shape: StepShape) -> dict[str, Any]:
    """Time the unified kernel on one step, against contiguous SDPA, the decode kernel and the gather reference."""
    from ..attention import kernel_name, paged_attention
    from ..model.paged_batch import random_paged_step
    from ..attention.triton_decode import default_scale
    from ..attention.triton_unified import unified_attention_triton

    dtype = torch_dtype(shape.dtype)
    step = random_paged_step(shape.seq_lens, shape.query_lens, shape.block_size, shape.num_heads, shape.num_kv_heads,
                             shape.head_dim, dtype, runtime.device(), seed=0, poison=False)
    args = step.args()
    scale = default_scale(shape.head_dim)
    paged_attention(*args)  # validates once
    out = torch.empty_like(step.q)
    ms = _time_ms(lambda: unified_attention_triton(*args, scale, out, max_query_len=max(shape.query_lens)))
    row: dict[str, Any] = {
        **asdict(shape), "kind": shape.kind, "num_tokens": sum(shape.query_lens),
        "dispatch": kernel_name(shape.query_lens, "triton"), "unified_ms": round(ms, 5),
        "tflops": round(shape.flops / (ms * 1e-3) / 1e12, 3),
    }
    sdpa = _contiguous_causal_sdpa(step, scale)
    if sdpa is not None:
        row.update(_against_sdpa(sdpa, out, ms))
    if shape.kind == "decode":
        row.update(_versus("decode_kernel", _time_ms(lambda: paged_attention(*args, out=out, check=False,
                                                                              max_query_len=1)), ms))
    row.update(_versus("gather", _time_ms(lambda: paged_attention(*args, backend="torch", check=False)), ms))
    return row


def _prefill_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_label = {r["label"]: r for r in rows}
    main, decode = by_label[PREFILL_MAIN.label], by_label[DECODE_VIA_UNIFIED.label]
    return [
        {"target": "prefill 1 x 4096: within 1.5x of contiguous SDPA (unified_ms <= 1.5 x sdpa_ms)",
         "measured": main["speed_vs_sdpa"], "met": main["unified_ms"] <= 1.5 * main["sdpa_ms"]},
        {"target": "decode b64 x 4096: the dispatch's decode kernel is at least as fast as the unified kernel",
         "measured": decode["speed_vs_decode_kernel"], "met": decode["decode_kernel_ms"] <= decode["unified_ms"]},
    ]


def _print_prefill(record: dict[str, Any]) -> None:
    print(heading("unified attention", record))
    print(f"{'step':52s} {'tokens':>6s} {'unified ms':>10s} {'TFLOP/s':>8s} {'vs SDPA':>8s} {'vs decode':>9s} "
          f"{'vs gather':>9s}")
    for r in record["rows"]:
        vs_sdpa = f"{r['speed_vs_sdpa']:.2f}x" if "speed_vs_sdpa" in r else "-"
        vs_decode = f"{r['speed_vs_decode_kernel']:.2f}x" if "speed_vs_decode_kernel" in r else "-"
        print(f"{r['label']:52s} {r['num_tokens']:>6d} {r['unified_ms']:>10.4f} {r['tflops']:>8.2f} {vs_sdpa:>8s} "
              f"{vs_decode:>9s} {r['speed_vs_gather']:>8.2f}x")
    _print_end(record)


def _print_end(record: dict[str, Any], *lines: str) -> None:
    """The targets met or missed, then ``lines``, then the record's note."""
    for t in record.get("targets", []):
        print(f"{'MET ' if t['met'] else 'MISSED'} {t['target']} (measured {t['measured']})")
    for line in (*lines, record.get("note")):
        if line:
            print(line)


def _targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's three GPU targets, judged on this run's measurements."""
    by_label = {r["label"]: r for r in rows}
    main, no_split, auto = by_label[MAIN.label], by_label[LONG_NO_SPLIT.label], by_label[LONG_AUTO.label]
    return [
        {"target": "b64 x 4096: >= 80% of copy bandwidth", "measured": main["fraction_of_copy_bw"],
         "met": main["fraction_of_copy_bw"] >= 0.80},
        {"target": "b64 x 4096: >= 0.95x contiguous SDPA", "measured": main["speed_vs_sdpa"],
         "met": main["speed_vs_sdpa"] >= 0.95},
        {"target": "b1 x 32768: split-K faster than no split",
         "measured": round(no_split["kernel_ms"] / auto["kernel_ms"], 3),
         "met": auto["num_splits_used"] > 1 and auto["kernel_ms"] < no_split["kernel_ms"]},
    ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """``--mode decode`` (record ``attention``) or ``--mode prefill`` (record ``attention-prefill``)."""
    prefill = getattr(args, "mode", "decode") == "prefill"
    record = metadata("attention-prefill" if prefill else "attention")
    on_gpu = runtime.BACKEND == "cuda"
    if prefill:
        rows = [measure_step(s) for s in (PREFILL_GPU_SHAPES if on_gpu else PREFILL_CPU_SHAPES)]
        record["rows"] = rows
    else:
        copy_gbps = copy_bandwidth_gbps() if on_gpu else None
        rows = [measure(s, copy_gbps) for s in (GPU_SHAPES if on_gpu else CPU_SHAPES)]
        record.update(copy_gbps=round(copy_gbps, 1) if copy_gbps else None, rows=rows)
        if on_gpu and not args.no_sweep:
            record["tile_sweep"] = [measure(MAIN, copy_gbps, tile, baselines=False) for tile in TILE_SWEEP]
    if on_gpu:
        record["targets"] = (_prefill_targets if prefill else _targets)(rows)
    else:
        figures = "TFLOP/s" if prefill else "GB/s, fraction of copy bandwidth"
        record["note"] = (f"CPU run: the Triton kernels ran in the interpreter on small shapes. "
                          f"GPU figures ({figures}, speed against SDPA) need CUDA.")
    return emit(args, record, _print_prefill if prefill else _print)


def _print(record: dict[str, Any]) -> None:
    print(heading("decode attention", record))
    if record["copy_gbps"]:
        print(f"device-to-device copy bandwidth: {record['copy_gbps']:,.0f} GB/s (read + write)")
    print(f"{'configuration':48s} {'splits':>6s} {'kernel ms':>10s} {'GB/s':>8s} {'of copy':>8s} "
          f"{'SDPA ms':>9s} {'vs SDPA':>8s} {'vs gather':>9s}")
    for r in record["rows"]:
        on_gpu = r["fraction_of_copy_bw"] is not None
        gbps = f"{r['gbps']:.0f}" if on_gpu else "-"
        frac = f"{r['fraction_of_copy_bw']:.0%}" if on_gpu else "-"
        print(f"{r['label']:48s} {r['num_splits_used']:>6d} {r['kernel_ms']:>10.4f} {gbps:>8s} {frac:>8s} "
              f"{r['sdpa_ms']:>9.4f} {r['speed_vs_sdpa']:>7.2f}x {r['speed_vs_gather']:>8.2f}x")
    sweep = ""
    if record.get("tile_sweep"):
        best = max(record["tile_sweep"], key=lambda r: r["gbps"])
        sweep = (f"tile sweep on '{MAIN.label}': best tile_n={best['tile_n']} num_warps={best['num_warps']} "
                 f"num_stages={best['num_stages']}: {best['kernel_ms']:.4f} ms, {best['gbps']:,.0f} GB/s")
    _print_end(record, sweep)


def plot_record(record: dict[str, Any]) -> Any:
    """Chapter 4's figure of an attention record; returns the matplotlib Figure.

    A GPU record shows achieved bandwidth against the copy bandwidth of the same run, and the
    speed against contiguous SDPA, with the issue's targets. A CPU record shows the three
    implementations' times, titled as what they are: interpreter timings, not GPU speeds.
    """
    import matplotlib.pyplot as plt

    rows = record["rows"]
    y = list(range(len(rows)))
    labels = [r["label"] for r in rows]
    source = f"{record['device']}, {record['date_utc'][:10]} (torch {record['torch']}, triton {record['triton']})"
    if record["backend"] == "cuda":
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 1.6 + 0.38 * len(rows)), sharey=True)
        left.barh(y, [r["gbps"] for r in rows], color="#88CCEE", edgecolor="black")
        left.axvline(record["copy_gbps"], color="black", ls="--", label=f"copy bandwidth {record['copy_gbps']:,.0f} GB/s")
        left.axvline(0.8 * record["copy_gbps"], color="#CC6677", ls=":", label="target: 80% of copy")
        left.set(yticks=y, yticklabels=labels, xlabel="K/V bytes read per second (GB/s)")
        left.invert_yaxis()
        left.legend(loc="lower right", fontsize=8)
        right.barh(y, [r["speed_vs_sdpa"] for r in rows], color="#117733", edgecolor="black")
        right.axvline(1.0, color="black", ls="--", label="as fast as SDPA")
        right.axvline(0.95, color="#CC6677", ls=":", label="target: 0.95x")
        right.set(xlabel="speed against SDPA on a contiguous cache (x)")
        right.legend(loc="lower right", fontsize=8)
        fig.suptitle(f"Paged decode attention, measured on {source}")
    else:
        fig, ax = plt.subplots(figsize=(10, 2.2 + 0.6 * len(rows)))
        series = (("kernel_ms", "Triton kernel (interpreter)", "#CC6677"), ("gather_ms", "torch gather reference", "#DDCC77"),
                  ("sdpa_ms", "SDPA, contiguous cache", "#117733"))
        for i, (key, name, colour) in enumerate(series):
            ax.barh([v + (i - 1) * 0.27 for v in y], [r[key] for r in rows], height=0.27, color=colour, label=name)
        fastest = min(r[key] for r in rows for key, _, _ in series)
        ax.set(yticks=y, yticklabels=labels, xscale="log", xlim=(fastest / 3, None),
               xlabel="milliseconds per call (log scale)")
        ax.invert_yaxis()
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8, frameon=False)
        fig.suptitle(f"CPU timings on {source}: the interpreter's speed, not a GPU's", fontsize=10)
    fig.tight_layout()
    return fig


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..cli_args import add_json_flag

    p = subparsers.add_parser("attention", help="paged decode attention: time, GB/s, against SDPA (chapter 4)",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--mode", choices=("decode", "prefill"), default="decode",
                   help="decode: the split-K decode kernel (record 'attention'); prefill: the unified kernel on "
                        "prompts, a prefix hit, a decode batch and a mixed step (record 'attention-prefill')")
    p.add_argument("--no-sweep", action="store_true", help="on CUDA, skip the tile-size sweep of the target shape")
    add_json_flag(p)
    add_out_flag(p)
    p.set_defaults(func=run)
