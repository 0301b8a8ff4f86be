"""The command line: ``python -m pagedkv_edu <command> [--json]``.

Each command lives beside its concept and exposes ``register(subparsers)``. No failure prints a
traceback: one ``error:`` line names the bad value (``PAGEDKV_TRACEBACK=1`` shows where).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Sequence

from .core.block_pool import MAX_NUM_BLOCKS
from .cli_args import OneLineParser, add_json_flag, whole_number
from .sim.contiguous import ALLOCATORS, RESERVE_POLICIES
from .engine.config import POLICIES
from .sim.simulate import simulate
from .specs import DTYPE_BYTES, format_bytes, get_spec, load_config
from .workload import MAX_SEQ_LEN, copilot50

__all__ = ["add_json_flag", "build_parser", "main"]

MAX_KV_BUDGET_TOKENS = 2**25
"""The largest budget ``simulate`` accepts: 33 M token slots, 16,384 requests at the longest (a
paged pool of that size is two million blocks at block size 16, :data:`~pagedkv_edu.core.block_pool.MAX_NUM_BLOCKS`)."""

# Modules (beside this one, on top of the package's layers) that add their own subcommands.
COMMAND_MODULES: tuple[str, ...] = (
    "pagedkv_edu.bench.generate_cli",
    "pagedkv_edu.bench",
    "pagedkv_edu.bench.serve",
    "pagedkv_edu.bench.http_server",
    "pagedkv_edu.bench.routing_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m pagedkv_edu",
        description="pagedkv-edu: KV-cache memory arithmetic, simulations, kernels and benchmarks.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _register_kv_size(subparsers)
    _register_simulate(subparsers)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: Any = args.func(args)
    except (ValueError, KeyError, IndexError, OSError, RuntimeError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: still one line, unless asked for the traceback
        if os.environ.get("PAGEDKV_TRACEBACK"):
            raise
        print(f"error: unexpected {type(exc).__name__}: {exc} (PAGEDKV_TRACEBACK=1 shows where)", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    return 0


# --- kv-size (chapter 0) ------------------------------------------------------------------
def _register_kv_size(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("kv-size", help="KV-cache bytes per token and in total for a model (chapter 0)")
    p.add_argument("--model", default="llama-3.2-1b",
                   help="a named model (llama-3.2-1b, llama-2-7b, smollm2-135m) or a path to a transformers config.json")
    p.add_argument("--tokens", type=whole_number(0, 2**40), default=2048, help="tokens per request (default 2048)")
    p.add_argument("--requests", type=whole_number(0, 2**30), default=1, help="concurrent requests (default 1)")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default=None, help="cache dtype (default: the model's)")
    add_json_flag(p)
    p.set_defaults(func=_kv_size)


def _kv_size(args: argparse.Namespace) -> dict[str, Any]:
    from_file = args.model.endswith(".json") or os.path.isdir(args.model)
    spec = load_config(args.model) if from_file else get_spec(args.model)
    if args.dtype:
        spec = spec.with_dtype(args.dtype)
    total = spec.kv_bytes(args.tokens, args.requests)
    result = {
        "model": spec.name, "dtype": spec.dtype, "num_layers": spec.num_layers,
        "num_kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
        "kv_bytes_per_token": spec.kv_bytes_per_token, "tokens": args.tokens, "requests": args.requests,
        "kv_bytes_total": total, "weight_bytes": spec.weight_bytes,
    }
    if not args.json:
        print(f"model            : {spec.name} ({spec.dtype})")
        print(f"per token        : {spec.num_layers} layers x {spec.num_kv_heads} KV heads x {spec.head_dim} dims"
              f" x 2 (K,V) x {spec.bytes_per_element} B = {spec.kv_bytes_per_token:,} B"
              f" ({format_bytes(spec.kv_bytes_per_token)})")
        print(f"per request      : {args.tokens:,} tokens -> {format_bytes(spec.kv_bytes(args.tokens))}")
        print(f"total            : {args.requests} requests -> {format_bytes(total)}")
        print(f"weights          : {spec.num_parameters / 1e9:.2f} B params -> {format_bytes(spec.weight_bytes)}"
              f" ({spec.weight_bytes / 1e9:.1f} GB)")
    return result


# --- simulate (chapters 1, 2) ------------------------------------------------------------------
def _register_simulate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="memory-only simulation of a workload, contiguous or paged (ch. 1-2)")
    p.add_argument("--workload", choices=["copilot50"], default="copilot50")
    p.add_argument("--policy", choices=POLICIES, default="paged")
    p.add_argument("--block-size", type=whole_number(1, 4096), default=16)
    p.add_argument("--kv-budget-tokens", type=whole_number(1, MAX_KV_BUDGET_TOKENS), default=10 * MAX_SEQ_LEN,
                   help="KV slots in the budget (default: 10 x max_seq_len, so 10 contiguous requests fit)")
    p.add_argument("--reserve", choices=RESERVE_POLICIES, default="max",
                   help="contiguous reservation rule, the paper's Orca baselines: max_seq_len (max), the prompt "
                        "plus the output rounded up to a power of two (pow2), or prompt plus output (oracle)")
    p.add_argument("--allocator", choices=ALLOCATORS, default="first-fit",
                   help="contiguous only: where reservations go, first-fit or the paper's buddy allocator")
    p.add_argument("--prefix-caching", action="store_true",
                   help="paged only: share cached prompt blocks between requests (ch. 8)")
    p.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    p.add_argument("--timeline", action="store_true", help="with --json, include every step and request")
    add_json_flag(p)
    p.set_defaults(func=_simulate)


def _simulate(args: argparse.Namespace) -> dict[str, Any]:
    if args.policy == "paged" and args.kv_budget_tokens // args.block_size > MAX_NUM_BLOCKS:
        raise ValueError(f"--kv-budget-tokens {args.kv_budget_tokens} at --block-size {args.block_size} is "
                         f"{args.kv_budget_tokens // args.block_size:,} blocks; a pool holds at most {MAX_NUM_BLOCKS:,}")
    result = simulate(copilot50(args.seed), args.policy, args.kv_budget_tokens,
                      block_size=args.block_size, reserve=args.reserve, allocator=args.allocator,
                      enable_prefix_caching=args.prefix_caching,
                      prompt_seed=args.seed)
    out = result.to_dict() if args.timeline else result.summary()
    if not args.json:
        s = result.summary()
        rule = f"block size {args.block_size}" if args.policy == "paged" else f"reserve={args.reserve}, {args.allocator}"
        print(f"workload copilot50 (seed {args.seed}), policy {args.policy} ({rule}), "
              f"budget {args.kv_budget_tokens:,} token slots")
        print(f"utilisation      : {s['utilisation']:.1%} of held slots hold tokens")
        for kind, frac in s["waste"].items():
            print(f"  {kind:15s}: {frac:.1%}")
        print(f"peak concurrency : {s['peak_concurrency']}   mean {s['mean_concurrency']}")
        print(f"preemptions      : {s['preemptions']}")
        print(f"queueing delay   : mean {s['mean_queue_delay_steps']} steps, max {s['max_queue_delay_steps']}")
        print(f"makespan         : {s['total_steps']} steps")
        if result.prefix_caching:
            print(f"prefix cache     : {result.prefix_hit_rate:.1%} of {result.tokens.prompt_tokens:,} prompt tokens "
                  f"hit; {result.tokens.prefill_tokens:,} tokens prefilled")
    return out
