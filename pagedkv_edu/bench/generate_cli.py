"""``python -m pagedkv_edu generate``: text through the paged KV cache, the command-line face of :func:`~pagedkv_edu.engine.generate.generate` (chapter 5)."""

from __future__ import annotations

import argparse
from typing import Any

from ..attention import BACKENDS
from ..engine.generate import generate
from ..specs import TORCH_DTYPES, torch_dtype

DEFAULT_PROMPT = "What is a KV cache in a language model? Answer in two sentences."


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..cli_args import add_json_flag, whole_number
    from ..model.loading import DEFAULT_MODEL, MODEL_NAMES

    p = subparsers.add_parser(
        "generate", help="generate text through the paged KV cache (chapter 5)",
        description="Greedy (or sampled) generation with the book's Llama decoder: every K/V read and write "
                    "goes through block tables. Streams the text, then prints tokens/s and the block tables.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"one of {', '.join(MODEL_NAMES)} (default {DEFAULT_MODEL})")
    p.add_argument("--prompt", action="append",
                   help="a prompt; repeat for a batch (default: a question about KV caches)")
    p.add_argument("--max-new-tokens", type=whole_number(0, 2**20), default=64)
    p.add_argument("--backend", choices=BACKENDS, default="torch",
                   help="every attention, prefill and decode: torch gather (ch. 3) or triton kernels (ch. 4-5)")
    p.add_argument("--block-size", type=whole_number(1, 4096), default=16)
    p.add_argument("--num-blocks", type=whole_number(1, 2**21), default=None, help="pool size (default: just enough for the batch)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    p.add_argument("--dtype", choices=TORCH_DTYPES, default="fp32")
    p.add_argument("--no-chat", action="store_true", help="do not wrap prompts in the chat template")
    p.add_argument("--llama-path", default=None, help="weights for --model llama-3.2-1b (or set PAGEDKV_LLAMA_PATH)")
    p.add_argument("--show-blocks", action="store_true", help="print every sequence's full block table")
    add_json_flag(p)
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> dict[str, Any]:
    from .. import runtime
    from ..model.loading import load_model

    texts = args.prompt or [DEFAULT_PROMPT]
    loaded = load_model(args.model, dtype=torch_dtype(args.dtype), seed=args.seed, llama_path=args.llama_path)
    if args.no_chat:
        loaded.chat = False
    prompts = [loaded.encode(t) for t in texts]
    stream = len(prompts) == 1 and not args.json
    result = generate(loaded.model, prompts, args.max_new_tokens, backend=args.backend, block_size=args.block_size,
                      num_blocks=args.num_blocks, temperature=args.temperature, seed=args.seed,
                      stop_token_ids=loaded.stop_token_ids, on_token=loaded.text_stream() if stream else None)
    completions = [loaded.tokenizer.decode(t, skip_special_tokens=True) for t in result.tokens]
    tables = result.block_tables or []
    out = {
        "model": args.model, "source": loaded.source, "device": runtime.device_name(), "backend": args.backend,
        "dtype": args.dtype, "block_size": args.block_size, "chat_template": loaded.chat,
        "load_seconds": round(loaded.load_seconds, 3),
        "prompts": texts, "prompt_tokens": [len(p) for p in prompts], "completions": completions,
        "token_ids": result.tokens, "new_tokens": result.num_new_tokens,
        "prefill_seconds": round(result.prefill_seconds, 4), "decode_seconds": round(result.decode_seconds, 4),
        "decode_steps": result.decode_steps, "tokens_per_second": round(result.tokens_per_second, 2),
        "kv_cache_bytes": result.kv_bytes, "attention": result.attention,
        "block_tables": [{"block_ids": t.block_ids, "fills": t.fills, "num_tokens": t.num_tokens} for t in tables],
    }
    if args.json:
        return out
    if stream:
        print()
    else:
        for text, completion in zip(texts, completions):
            print(f"> {text}\n{completion}\n")
    print(f"\n{result.num_new_tokens} new tokens in {result.seconds:.2f} s: {result.tokens_per_second:.1f} tokens/s "
          f"(prefill {sum(out['prompt_tokens'])} tokens in {result.prefill_seconds:.2f} s, "
          f"{result.decode_steps} decode steps in {result.decode_seconds:.2f} s; "
          f"{args.model} on {runtime.device_name()}; load {loaded.load_seconds:.1f} s)")
    print("attention: " + ", ".join(f"{phase} {name}" for phase, name in result.attention.items()))
    for i, table in enumerate(tables):
        print(f"sequence {i}: {table.num_tokens} tokens in blocks {table.block_ids} (last block "
              f"{table.fills[-1] if table.fills else 0}/{table.block_size} full)")
        if args.show_blocks:
            print(table)
    return out
