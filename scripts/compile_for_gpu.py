"""Compile the attention kernels for an NVIDIA GPU on a machine that has none.

How to run (from the repository root; no GPU needed, about 4 minutes on a busy 2-core CPU, or one with --quick):

    python scripts/compile_for_gpu.py [--arch 90] [--quick]

On a CPU the book's kernels run in the Triton interpreter, which accepts things a GPU
compiler refuses (a ``tl.dot`` smaller than 16 in some dimension, a layout that needs more
registers than exist). Triton can still compile for a GPU ahead of time: it needs only its
bundled LLVM and ``ptxas``, not a device. This script does that for the decode kernel in the
configurations the tests and benchmarks use, the split-K merge kernel, the unified
(prefill / mixed-step) kernel, the store kernel, and chapter 4's whole-kernel solution and its merge,
and prints each one's registers, spills and shared memory (read from the cubin with the
bundled ``cuobjdump``). Integer strides and pointers are marked divisible by 16, as Triton's
JIT marks them at launch, so the code (vectorised loads, pipelining) is the one a GPU would run.

``import pagedkv_edu`` would switch Triton to the interpreter on a machine without CUDA, so
this script registers a stand-in ``pagedkv_edu.runtime`` that says "cuda" before importing
the kernel modules. Nothing is launched.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

_package = types.ModuleType("pagedkv_edu")
_package.__path__ = [str(ROOT / "pagedkv_edu")]
_runtime = types.ModuleType("pagedkv_edu.runtime")
_runtime.BACKEND = "cuda"
_runtime.device = lambda: torch.device("cuda")
_package.runtime = _runtime
sys.modules.update({"pagedkv_edu": _package, "pagedkv_edu.runtime": _runtime})

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from pagedkv_edu.attention.triton_decode import (  # noqa: E402
    _TL_DTYPES,
    launch_config,
    merge_splits_kernel,
    paged_decode_kernel,
)
from pagedkv_edu.attention.triton_store import store_kv_kernel  # noqa: E402
from pagedkv_edu.attention.triton_unified import unified_attention_kernel, unified_config  # noqa: E402
from pagedkv_edu.exercises.solutions import ch4_kernel as chapter4  # noqa: E402

TYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def compile_kernel(fn, types_: dict[str, str], constexprs: dict, arch: int, num_warps: int = 4,
                   num_stages: int = 3) -> dict[str, int]:
    """Compile ``fn`` for sm_<arch>; return its registers, spill stores (STACK) and shared bytes."""
    signature = {name: "constexpr" if name in constexprs else types_[name] for name in fn.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
             if name not in constexprs and (types_[name].startswith("*") or name.startswith("stride"))}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": num_warps, "num_stages": num_stages})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(CUOBJDUMP), "-res-usage", f.name], capture_output=True, text=True).stdout
    match = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", usage)
    if match is None:
        raise RuntimeError(f"cuobjdump printed no resource usage:\n{usage}")
    regs, stack, shared = map(int, match.groups())
    return {"registers": regs, "stack": stack, "shared": shared + kernel.metadata.shared}


def compile_decode(dtype: torch.dtype, group: int, head_dim: int, block_size: int, split: bool, arch: int,
                   tile_n: int | None = None, num_warps: int = 4, num_stages: int = 3) -> dict[str, int]:
    cfg = launch_config(group, head_dim, dtype, gpu=True, tile_n=tile_n, num_warps=num_warps, num_stages=num_stages)
    t = TYPE_NAMES[dtype]
    out = "fp32" if split else t
    types_ = {"q_ptr": f"*{t}", "k_cache_ptr": f"*{t}", "v_cache_ptr": f"*{t}", "block_tables_ptr": "*i32",
              "seq_lens_ptr": "*i32", "out_ptr": f"*{out}", "lse_ptr": f"*{out}", "qk_scale": "fp32",
              "num_splits": "i32"}
    types_ |= {n: "i32" for n in paged_decode_kernel.arg_names if n.startswith("stride")}
    constexprs = dict(GROUP=group, GROUP_PAD=cfg.group_pad, HEAD_DIM=head_dim, HEAD_DIM_PAD=cfg.head_dim_pad,
                      BLOCK_SIZE=block_size, TILE_N=cfg.tile_n, WRITE_LSE=split,
                      DOT_DTYPE=tl.float32 if cfg.dot_fp32 else _TL_DTYPES[dtype],
                      DOT_PRECISION="ieee" if cfg.dot_fp32 else "tf32")
    return compile_kernel(paged_decode_kernel, types_, constexprs, arch, cfg.num_warps, cfg.num_stages)


def compile_unified(dtype: torch.dtype, group: int, head_dim: int, block_size: int, arch: int,
                    block_m: int | None = None, tile_n: int | None = None) -> dict[str, int]:
    cfg = unified_config(group, head_dim, dtype, gpu=True, block_m=block_m, tile_n=tile_n)
    t = TYPE_NAMES[dtype]
    types_ = {"q_ptr": f"*{t}", "k_cache_ptr": f"*{t}", "v_cache_ptr": f"*{t}", "block_tables_ptr": "*i32",
              "seq_lens_ptr": "*i32", "query_start_loc_ptr": "*i32", "out_ptr": f"*{t}", "qk_scale": "fp32",
              "num_seqs": "i32"}
    types_ |= {n: "i32" for n in unified_attention_kernel.arg_names if n.startswith("stride")}
    constexprs = dict(GROUP=group, BLOCK_M=cfg.block_m, BLOCK_Q=cfg.block_q(group), HEAD_DIM=head_dim,
                      HEAD_DIM_PAD=cfg.head_dim_pad, BLOCK_SIZE=block_size, TILE_N=cfg.tile_n,
                      DOT_DTYPE=tl.float32 if cfg.dot_fp32 else _TL_DTYPES[dtype],
                      DOT_PRECISION="ieee" if cfg.dot_fp32 else "tf32")
    return compile_kernel(unified_attention_kernel, types_, constexprs, arch, cfg.num_warps, cfg.num_stages)


def compile_merge(head_dim: int, num_splits: int, arch: int) -> dict[str, int]:
    types_ = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": "*bf16", "num_splits": "i32"}
    types_ |= {n: "i32" for n in merge_splits_kernel.arg_names if n.startswith("stride")}
    constexprs = dict(HEAD_DIM=head_dim, HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
                      SPLITS_PAD=triton.next_power_of_2(num_splits))
    return compile_kernel(merge_splits_kernel, types_, constexprs, arch, num_stages=1)


def compile_store(dtype: torch.dtype, num_kv_heads: int, head_dim: int, tokens: int, arch: int) -> dict[str, int]:
    t = TYPE_NAMES[dtype]
    types_ = {"k_ptr": f"*{t}", "v_ptr": f"*{t}", "k_cache_ptr": f"*{t}", "v_cache_ptr": f"*{t}",
              "slot_ptr": "*i32", "num_tokens": "i32", "stride_kn": "i32", "stride_kh": "i32",
              "stride_vn": "i32", "stride_vh": "i32"}
    row = num_kv_heads * head_dim
    constexprs = dict(HEAD_DIM=head_dim, ROW=row, ROW_PAD=triton.next_power_of_2(row), TOKENS=tokens)
    return compile_kernel(store_kv_kernel, types_, constexprs, arch, num_stages=1)


def compile_chapter4(dtype: torch.dtype, group: int, head_dim: int, block_size: int, arch: int,
                     tile_n: int = 32) -> dict[str, int]:
    """Chapter 4's whole-kernel solution (stage 1), as the grader times it on a GPU (tiles of 32)."""
    t = TYPE_NAMES[dtype]
    fn = chapter4.paged_decode_kernel
    types_ = {"q_ptr": f"*{t}", "k_cache_ptr": f"*{t}", "v_cache_ptr": f"*{t}", "block_tables_ptr": "*i32",
              "seq_lens_ptr": "*i32", "part_ptr": "*fp32", "lse_ptr": "*fp32", "qk_scale": "fp32", "num_splits": "i32"}
    types_ |= {n: "i32" for n in fn.arg_names if n.startswith("stride")}
    constexprs = dict(GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
                      HEAD_DIM_PAD=max(16, triton.next_power_of_2(head_dim)), BLOCK_SIZE=block_size, TILE_N=tile_n)
    return compile_kernel(fn, types_, constexprs, arch)


def compile_chapter4_merge(dtype: torch.dtype, head_dim: int, num_splits: int, arch: int) -> dict[str, int]:
    fn = chapter4.merge_splits_kernel
    types_ = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": f"*{TYPE_NAMES[dtype]}", "num_splits": "i32"}
    types_ |= {n: "i32" for n in fn.arg_names if n.startswith("stride")}
    constexprs = dict(HEAD_DIM=head_dim, HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
                      SPLITS_PAD=triton.next_power_of_2(num_splits))
    return compile_kernel(fn, types_, constexprs, arch, num_stages=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90 = H100/H200)")
    parser.add_argument("--quick", action="store_true", help="one configuration of each kernel (for the tests)")
    args = parser.parse_args(argv)

    dtypes = [torch.bfloat16, torch.float32] if args.quick else [torch.bfloat16, torch.float16, torch.float32]
    shapes = [(4, 64)] if args.quick else [(4, 64), (3, 64), (1, 128), (4, 128), (3, 80)]
    block_sizes = [16] if args.quick else [1, 16, 128]
    jobs = [(f"decode {TYPE_NAMES[d]} group {g} head_dim {hd} block {b}{' split' if s else ''}",
             lambda d=d, g=g, hd=hd, b=b, s=s: compile_decode(d, g, hd, b, s, args.arch))
            for d in dtypes for g, hd in shapes for b in block_sizes for s in (False, True)
            if not (args.quick and d == torch.float32 and not s)]
    # The unified kernel's block size only changes its address arithmetic: block 16, plus one odd size.
    jobs += [(f"unified {TYPE_NAMES[d]} group {g} head_dim {hd} block 16",
              lambda d=d, g=g, hd=hd: compile_unified(d, g, hd, 16, args.arch))
             for d in dtypes for g, hd in shapes if not (args.quick and d == torch.float32)]
    if not args.quick:
        jobs += [(f"unified {TYPE_NAMES[d]} group 4 head_dim 256 block 16",
                  lambda d=d: compile_unified(d, 4, 256, 16, args.arch)) for d in dtypes]
        jobs.append(("unified bf16 group 4 head_dim 64 block 6",
                     lambda: compile_unified(torch.bfloat16, 4, 64, 6, args.arch)))
    jobs += [(f"merge head_dim {hd} splits {n}", lambda hd=hd, n=n: compile_merge(hd, n, args.arch))
             for hd in ((64,) if args.quick else (64, 80, 128)) for n in ((8,) if args.quick else (2, 64))]
    jobs += [(f"store {TYPE_NAMES[d]} 8 kv heads x 64, 8 tokens", lambda d=d: compile_store(d, 8, 64, 8, args.arch))
             for d in dtypes]
    jobs += [(f"chapter 4 solution {TYPE_NAMES[d]} group {g} head_dim {hd} block {b}",
              lambda d=d, g=g, hd=hd, b=b: compile_chapter4(d, g, hd, b, args.arch))
             for d in dtypes[:1 if args.quick else 2] for g, hd, b in ((4, 64, 16), (3, 64, 5))]
    jobs.append(("chapter 4 solution merge bf16 head_dim 64 splits 3",
                 lambda: compile_chapter4_merge(torch.bfloat16, 64, 3, args.arch)))
    if not args.quick:
        jobs += [(f"decode bf16 group 4 head_dim 64 block 16, tile {t} warps {w} stages {s}",
                  lambda t=t, w=w, s=s: compile_decode(torch.bfloat16, 4, 64, 16, False, args.arch, t, w, s))
                 for t, w, s in ((32, 4, 3), (128, 4, 3), (64, 8, 3), (64, 4, 2))]

    spilled = []
    for name, job in jobs:
        usage = job()
        print(f"sm_{args.arch}  {name:58s} {usage['registers']:4d} registers  {usage['stack']:5d} B stack  "
              f"{usage['shared']:6d} B shared")
        if usage["stack"]:
            spilled.append(name)
    print(f"compiled {len(jobs)} kernels for sm_{args.arch}" + (f"; spills in: {', '.join(spilled)}" if spilled else
                                                                "; no register spills"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
