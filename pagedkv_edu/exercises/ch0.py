"""Grader for chapter 0 (why a KV cache): KV bytes per token, from a model's config.

The reader gets what a model ships, its ``config.json`` as a dict, so the GQA mistake can be made:
a config names both ``num_attention_heads`` (query heads) and ``num_key_value_heads``, and only the
second counts. Hidden random shapes, most of them with GQA, catch it, and the factor 2 for K and V
forgotten, bits for bytes, elements for bytes; each has its own hint.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from functools import reduce
from typing import Any

from ..specs import MODELS, ModelSpec
from .grading import ArgsCase, Reader, as_int, grade, seeded, short
from .messages import Message, tr
from .solutions import ch0 as reference


def config_of(spec: ModelSpec) -> dict[str, Any]:
    """A transformers-style ``config.json`` (as a dict) with ``spec``'s shape: what a reader downloads."""
    return {
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
    }


def _config(layers: int, heads: int, kv_heads: int, head_dim: int) -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": heads * head_dim, "intermediate_size": 4 * heads * head_dim,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "head_dim": head_dim, "vocab_size": 32000, "tie_word_embeddings": False}


KV_BYTES_CASES: tuple[ArgsCase, ...] = tuple(
    ArgsCase(s.name, (config_of(s), s.bytes_per_element)) for s in MODELS.values()
) + (ArgsCase(tr("fp32, one layer, one head"), (_config(1, 1, 1, 128), 4)),
     ArgsCase("fp8 GQA", (_config(32, 32, 8, 128), 1)))


def _draw_kv_bytes(rng: random.Random, i: int) -> ArgsCase:
    kv_heads = rng.choice((1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 40))
    group = rng.choice((1, 2, 4, 4, 8, 8))   # query heads per KV head; 1 is plain multi-head attention
    return ArgsCase(tr("hidden case {n}", n=i + 1), (_config(rng.randint(1, 96), kv_heads * group, kv_heads,
                                                              rng.choice((32, 48, 64, 80, 96, 112, 128, 160, 192,
                                                                          256))),
                                                      rng.choice((1, 2, 4))))


HIDDEN_KV_BYTES = seeded(200, 0, _draw_kv_bytes)

_KV_BYTES_SLIPS: tuple[tuple[float, Message], ...] = (
    (0.5, tr("half: did you forget that both K and V are stored?")),
    (8, tr("eight times: bits, not bytes?")),
    (2, tr("twice: K and V counted twice?")),
)


def _gqa_hint(config: Mapping[str, Any]) -> Message:
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    return tr("that counts num_attention_heads ({heads}), the query heads: under grouped-query attention "
              "{group} query heads share one K/V head, and the cache keeps K and V only for the "
              "num_key_value_heads ({kv_heads})", heads=heads, group=heads // kv_heads, kv_heads=kv_heads)


def _hint(value: int, expected: int, config: Mapping[str, Any], bytes_per_element: int) -> Message | None:
    group = config["num_attention_heads"] // config["num_key_value_heads"]
    if group > 1:   # the GQA mistake, alone or with one of the other slips
        if value == expected * group:
            return tr("{group} times too many: {why}", group=group, why=_gqa_hint(config))
        also = next((why for ratio, why in _KV_BYTES_SLIPS if value == expected * group * ratio), None)
        if also is None and value * bytes_per_element == expected * group:
            also = tr("elements, not bytes: multiply by bytes_per_element")
        if also is not None:
            return tr("{gqa}; and besides, {also}", gqa=_gqa_hint(config), also=also)
    whys = [why for ratio, why in _KV_BYTES_SLIPS if value == expected * ratio]
    if value * bytes_per_element == expected:   # at 2 bytes per element, the same number as "half"
        whys.append(tr("that is elements, not bytes: multiply by bytes_per_element"))
    if not whys:
        return None
    return reduce(lambda first, second: tr("{first}; or {second}", first=first, second=second), whys)


def _describe(config: Mapping[str, Any], bytes_per_element: int) -> str:
    keys = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size")
    return "config {" + ", ".join(f"{k}: {config[k]}" for k in keys) + f", ...}}, bytes_per_element={bytes_per_element}"


def _run_kv_bytes(fn: Reader, case: ArgsCase) -> list[str]:
    config, bytes_per_element = case.args
    expected = reference.kv_bytes_per_token(config, bytes_per_element)
    got = fn(dict(config), bytes_per_element)   # a copy: a reader's function may change the dict it is given
    value = as_int(got)
    if value is None:
        return [tr("got {got}, expected a whole number of bytes ({expected:,})", got=short(got), expected=expected)]
    if value == expected:
        return []
    hint = _hint(value, expected, config, bytes_per_element)
    if hint is None:
        return [tr("{inputs}: got {got:,}, expected {expected:,}", inputs=_describe(config, bytes_per_element),
                   got=value, expected=expected)]
    return [tr("{inputs}: got {got:,}, expected {expected:,} ({hint})", inputs=_describe(config, bytes_per_element),
               got=value, expected=expected, hint=hint)]


def check_kv_bytes_per_token(fn: Callable[[dict[str, Any], int], int]) -> bool:
    """Grade ``fn(config, bytes_per_element)`` on the book's models' configs and hidden random ones."""
    return grade("kv_bytes_per_token（每個 token 的 KV 位元組）", fn, KV_BYTES_CASES, HIDDEN_KV_BYTES, _run_kv_bytes,
                 constant_is_stub=True)
