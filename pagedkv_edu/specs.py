"""Model shapes and the KV-cache arithmetic of chapter 0.

``bytes_per_token = num_layers x num_kv_heads x head_dim x 2 (K and V) x bytes_per_element``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import check_whole

if TYPE_CHECKING:
    import torch

DTYPES: dict[str, tuple[str, int]] = {
    "fp32": ("float32", 4), "fp16": ("float16", 2), "bf16": ("bfloat16", 2), "fp8": ("float8_e4m3fn", 1),
}
"""The book's one dtype table: each short name the book and the command line use, torch's name
for it, and its bytes per element (torch's ``itemsize``, known here without importing torch)."""

DTYPE_BYTES: dict[str, int] = {name: size for name, (_, size) in DTYPES.items()}
"""Bytes per element by short name: a view of :data:`DTYPES`."""

TORCH_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")
"""The dtypes this book computes in (fp8 is a storage format here: chapter 0 sizes it, nothing runs in it)."""


def torch_dtype(name: str) -> "torch.dtype":
    """The torch dtype of a short name (``"bf16"`` -> ``torch.bfloat16``); torch is imported only here."""
    import torch

    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return getattr(torch, DTYPES[name][0])


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """layers x KV heads x head_dim x 2 (K and V) x bytes per element: the book's one KV-bytes formula.

    A block of ``block_size`` tokens costs ``block_size`` times this; a batch reads it once per
    token it holds.
    """
    return num_layers * num_kv_heads * head_dim * 2 * bytes_per_element

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
            try:
                check_whole(field, getattr(self, field), 1, 2**40)
            except ValueError as exc:
                raise ValueError(f"{self.name}: {exc}") from None
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
        return kv_bytes_per_token(self.num_layers, self.num_kv_heads, self.head_dim, self.bytes_per_element)

    def kv_bytes(self, tokens: int, requests: int = 1) -> int:
        """KV bytes for ``requests`` sequences of ``tokens`` tokens each."""
        check_whole("tokens", tokens)
        check_whole("requests", requests)
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
        # 7-8B models with GQA (8 KV heads): 128 KiB per token, a quarter of Llama-2-7B's. The article's
        # "50 requests outweigh the weights" assumes a 7B model without GQA; these need about 134 and 149.
        ModelSpec("mistral-7b", 32, 32, 8, 128, 4096, 14336, 32000, False, "fp16"),
        ModelSpec("llama-3-8b", 32, 32, 8, 128, 4096, 14336, 128256, False, "bf16"),
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
    """A spec from a transformers config (an object such as ``LlamaConfig``, or its dict).

    Every field is checked, with the config's own key in the message, before any arithmetic.
    """
    cfg = config.to_dict() if hasattr(config, "to_dict") else config
    if not isinstance(cfg, dict):
        raise ValueError(f"a model config must be a JSON object (a transformers config.json), "
                         f"got a {type(cfg).__name__}")
    label = str(name or cfg.get("_name_or_path") or cfg.get("model_type") or "custom")
    missing = [k for k in ("num_attention_heads", "num_hidden_layers", "hidden_size", "intermediate_size",
                           "vocab_size") if k not in cfg]
    if missing:
        raise ValueError(f"{label}: the config has no {', '.join(missing)}")
    for key in ("num_attention_heads", "hidden_size"):
        try:
            check_whole(key, cfg[key], 1)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
    heads = cfg["num_attention_heads"]
    return ModelSpec(
        name=label,
        num_layers=cfg["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        vocab_size=cfg["vocab_size"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype=dtype,
    )


def load_config(path: str | Path) -> ModelSpec:
    """The spec of a transformers ``config.json`` file; a clear ``ValueError`` for anything else."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give the path of its config.json")
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a readable JSON config: {exc}") from None
    return spec_from_config(config, name=str(path))


def format_bytes(n: float) -> str:
    """Binary units, as the articles use them (32 KiB, 1.5 GiB)."""
    if abs(n) >= 2**80:
        return f"about 2**{int(abs(n)).bit_length() - 1} B"    # past a float's exact range: no rounding lies
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}".replace(".00 ", " ")
    return f"{int(n)} B"


# --- the book's two ratios, defined once: the prefix hit rate (chapter 8) and KV utilisation (chapter 1) ---
def hit_rate(hit_tokens: int, prompt_tokens: int) -> float:
    """Prompt tokens found in a prefix cache over the prompt tokens looked up, each prompt once (vLLM's
    measure); 0.0 when nothing was looked up."""
    return hit_tokens / prompt_tokens if prompt_tokens else 0.0


def utilisation(stored_tokens: int, held_slots: int) -> float:
    """Of the K/V slots held by sequences, the share holding a token (the paper's 20.4-38.2% before vLLM);
    1.0 when nothing is held, since nothing is wasted."""
    return stored_tokens / held_slots if held_slots else 1.0


def step_kind(query_lens: Sequence[int]) -> str:
    """What a step is, by the tokens each sequence brings, defined once for the stats, the profile and the kernels:
    "decode" when every sequence brings exactly one (the decode kernel's case, a one-token prompt chunk
    included), "prefill" when none does, "mixed" otherwise, "" for an empty step."""
    ones = sum(1 for n in query_lens if n == 1)
    return "" if not query_lens else "decode" if ones == len(query_lens) else "prefill" if ones == 0 else "mixed"
