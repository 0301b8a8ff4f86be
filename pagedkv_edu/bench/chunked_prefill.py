"""``bench chunked-prefill``: does cutting prompts into chunks cost more than prefilling them whole? (chapter 6)

The same prompts are prefilled (each request asks for one token) by the same engine under
several token budgets per step: none (every prompt whole, in one step), then smaller ones
(``max_num_batched_tokens``). The runs alternate, ``--repeats`` times each, and the table
gives each budget's best time over the unchunked one's, and whether every first token is
the same. A chunk attends to the earlier chunks' K/V through the cache; the rest of the
work is the same tokens through the same layers.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from ..cli_args import add_json_flag, whole_number
from ..engine import LLMEngine, SamplingParams
from ..model.loading import MODEL_NAMES, LoadedModel, load_model
from . import add_out_flag, emit, metadata


def prefill_time(model: LoadedModel, prompts: list[list[int]], budget: int | None, kv_budget_tokens: int,
                 block_size: int = 16) -> tuple[float, list[int], int]:
    """Seconds to prefill every prompt (one output token each) under ``budget`` tokens per step; first tokens; steps."""
    engine = LLMEngine(model.model, model.tokenizer, kv_budget_tokens=kv_budget_tokens, block_size=block_size,
                       max_num_batched_tokens=budget, watermark=0.0)
    start = time.perf_counter()
    outputs = engine.generate(prompts, SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
    return time.perf_counter() - start, [o.token_ids[0] for o in outputs], len(engine.history)


def compare(model: LoadedModel, prompts: list[list[int]], budgets: list[int], repeats: int = 2,
            block_size: int = 16) -> dict[str, Any]:
    """Best-of-``repeats`` prefill time per budget (None first: unchunked), the runs interleaved."""
    total = sum(map(len, prompts))
    kv_budget = -(-total // block_size) * block_size + block_size * len(prompts)
    configs: list[int | None] = [None, *budgets]
    best: dict[int | None, float] = {}
    tokens: dict[int | None, list[int]] = {}
    steps: dict[int | None, int] = {}
    for _ in range(repeats):
        for budget in configs:
            seconds, tokens[budget], steps[budget] = prefill_time(model, prompts, budget, kv_budget, block_size)
            best[budget] = min(best.get(budget, float("inf")), seconds)
    return {"prompt_tokens": total, "requests": len(prompts), "repeats": repeats, "runs": [
        {"max_num_batched_tokens": b, "steps": steps[b], "best_seconds": round(best[b], 3),
         "vs_unchunked": round(best[b] / best[None], 3), "same_first_tokens": tokens[b] == tokens[None]}
        for b in configs]}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("chunked-prefill", help="prefill time under per-step token budgets, against unchunked",
                              description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODEL_NAMES, default="smollm2-135m")
    p.add_argument("--num-requests", type=whole_number(1, 1000), default=16)
    p.add_argument("--length-scale", type=float, default=1.0)
    p.add_argument("--budgets", type=whole_number(1, 2**20), nargs="+", default=[8192, 2048],
                   help="max_num_batched_tokens values to compare with no cap")
    p.add_argument("--repeats", type=whole_number(1, 20), default=2)
    add_json_flag(p)
    add_out_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from .serve import make_setup

    meta = metadata("chunked-prefill")
    torch.manual_seed(0)
    model = load_model(args.model)
    setup = make_setup(model, num_requests=args.num_requests, length_scale=args.length_scale)
    record = {**meta, "model": args.model, "torch_threads": torch.get_num_threads(),
              **compare(model, setup.prompts, args.budgets, args.repeats)}
    return emit(args, record, print_table)


def print_table(record: dict[str, Any]) -> None:
    print(f"{record['model']}: {record['requests']} prompts, {record['prompt_tokens']:,} tokens, best of "
          f"{record['repeats']} ({record['torch_threads']} threads)")
    print(f"{'tokens per step':>16} {'steps':>6} {'seconds':>9} {'vs unchunked':>13} {'same first tokens':>18}")
    for r in record["runs"]:
        cap = "no cap" if r["max_num_batched_tokens"] is None else f"{r['max_num_batched_tokens']:,}"
        print(f"{cap:>16} {r['steps']:>6} {r['best_seconds']:>9} {r['vs_unchunked']:>12}x {str(r['same_first_tokens']):>18}")
