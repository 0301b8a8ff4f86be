"""Model shapes and the KV-cache arithmetic of chapter 0.

Every decoder layer stores one key and one value vector per KV head for every token it
has seen. So a token costs

    bytes_per_token = num_layers x num_kv_heads x head_dim x 2 (K and V) x bytes_per_element

independent of the batch. Grouped-query attention (GQA) shrinks it by sharing each KV head
among several query heads: Llama-3.2-1B has 32 query heads but only 8 KV heads, which is
why its cache costs 32 KiB per token and not 128 KiB.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per element of the cache dtypes the book talks about."""

KIB = 1024
MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class ModelSpec:
    """The parts of a decoder's shape that decide its KV-cache and weight sizes."""

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size",
                      "intermediate_size", "vocab_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{self.name}: {field} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {sorted(DTYPE_BYTES)}")

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def gqa_ratio(self) -> int:
        """Query heads per KV head (1 = plain multi-head attention)."""
        return self.num_heads // self.num_kv_heads

    @property
    def kv_bytes_per_token(self) -> int:
        """layers x KV heads x head_dim x 2 (K and V) x bytes per element."""
        return self.num_layers * self.num_kv_heads * self.head_dim * 2 * self.bytes_per_element

    def kv_bytes(self, tokens: int, requests: int = 1) -> int:
        """KV bytes for ``requests`` sequences of ``tokens`` tokens each."""
        if tokens < 0 or requests < 0:
            raise ValueError(f"tokens and requests must be >= 0, got tokens={tokens}, requests={requests}")
        return self.kv_bytes_per_token * tokens * requests

    @property
    def num_parameters(self) -> int:
        """Parameter count of a Llama-style decoder with this shape."""
        h, hd = self.hidden_size, self.head_dim
        attn = h * self.num_heads * hd * 2 + h * self.num_kv_heads * hd * 2  # q, o and k, v
        mlp = 3 * h * self.intermediate_size  # gate, up, down (SwiGLU)
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        embed = self.vocab_size * h
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + self.num_layers * per_layer + h + lm_head

    @property
    def weight_bytes(self) -> int:
        """Weights stored in the same dtype as the cache."""
        return self.num_parameters * self.bytes_per_element

    def with_dtype(self, dtype: str) -> "ModelSpec":
        """The same shape with another storage dtype."""
        return replace(self, dtype=dtype)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # The block-table article: Llama-3.2-1B in bf16 with GQA needs 32 KiB per token.
        ModelSpec("llama-3.2-1b", 16, 32, 8, 64, 2048, 8192, 128256, True, "bf16"),
        # The paged-KV-cache article: "a typical 7B model in FP16": 14 GB of weights. Llama-2-7B's shape, no GQA.
        ModelSpec("llama-2-7b", 32, 32, 32, 128, 4096, 11008, 32000, False, "fp16"),
        # The model this book runs with real weights on a CPU (HuggingFaceTB/SmolLM2-135M-Instruct).
        ModelSpec("smollm2-135m", 30, 9, 3, 64, 576, 1536, 49152, True, "bf16"),
    )
}


def get_spec(name: str) -> ModelSpec:
    """A named model's spec; raises with the known names when ``name`` is unknown."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}") from None


def spec_from_config(config: Any, name: str | None = None, dtype: str = "bf16") -> ModelSpec:
    """A spec from a transformers config (an object such as ``LlamaConfig``, or its dict)."""
    cfg = config if isinstance(config, dict) else config.to_dict()
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return ModelSpec(
        name=name or cfg.get("_name_or_path") or cfg.get("model_type", "custom"),
        num_layers=cfg["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        vocab_size=cfg["vocab_size"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype=dtype,
    )


def format_bytes(n: float) -> str:
    """Binary units, as the seeds use them (32 KiB, 1.5 GiB)."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}".replace(".00 ", " ")
    return f"{int(n)} B"
