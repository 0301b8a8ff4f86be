"""A Llama decoder in one file, whose every K/V read and write goes through the paged cache (chapter 5).

RMSNorm, RoPE (llama3 scaling), GQA, SwiGLU; per layer ``cache.write(k, v)`` then
``cache.attend(q)``. Its input is a serving batch: the new tokens of several sequences end
to end, ``[num_tokens]``, described by a :class:`~pagedkv_edu.attention.kv_cache.StepMetadata`. Weights
are a transformers ``LlamaForCausalLM`` state dict's own tensors (no copy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..specs import kv_bytes_per_token
from ..attention.kv_cache import PagedKVCache, StepMetadata


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters the forward pass needs (a subset of transformers' ``LlamaConfig``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope_scaling: tuple[tuple[str, float], ...] = ()
    """llama3 frequency scaling as (name, value) pairs; empty for plain RoPE."""

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")

    @classmethod
    def from_hf(cls, config: Any) -> "LlamaConfig":
        """Read a transformers ``LlamaConfig``; refuse the variants this forward does not implement."""
        if getattr(config, "model_type", "llama") != "llama":
            raise ValueError(f"expected a llama config, got model_type={config.model_type!r}")
        for flag in ("attention_bias", "mlp_bias"):
            if getattr(config, flag, False):
                raise ValueError(f"{flag}=True is not supported by this compact Llama")
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={config.hidden_act!r} is not supported (Llama uses silu)")
        rope = dict(config.rope_parameters)
        rope_type = rope.get("rope_type", "default")
        if rope_type not in ("default", "llama3"):
            raise ValueError(f"rope_type={rope_type!r} is not supported; this Llama knows 'default' and 'llama3'")
        scaling: tuple[tuple[str, float], ...] = ()
        if rope_type == "llama3":
            keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
            scaling = tuple((k, float(rope[k])) for k in keys)
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            rms_norm_eps=float(config.rms_norm_eps),
            rope_theta=float(rope["rope_theta"]),
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=bool(config.tie_word_embeddings),
            rope_scaling=scaling,
        )


# --- the pieces ---------------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / RMS(x) * weight, computed in float32 whatever x's dtype (as Llama does)."""
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: Mapping[str, float] | None = None) -> torch.Tensor:
    """The ``head_dim / 2`` rotation frequencies theta^(-2i/d), with llama3 scaling if given.

    llama3 scaling slows the *low* frequencies (long wavelengths, which encode far-apart
    positions) by ``factor``, keeps the high ones (local order), and blends smoothly in between.
    It is half of how Llama 3.1 reached 128K positions from 8K: 3.1 used ``factor = 8`` *and*
    continued pre-training on long documents. Llama 3.2 1B and 3B use ``factor = 32``.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim))
    if not scaling:
        return inv_freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)      # low frequencies: slow down
    smooth = (old_context / wavelen - low) / (high - low)                              # 0 at low, 1 at high edge
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_context / high) * ~(wavelen > old_context / low)
    return torch.where(medium, blended, scaled)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of angle position x frequency, ``[num_tokens, head_dim]`` (halves repeated)."""
    angles = positions[:, None].to(torch.float32) * inv_freq[None, :].to(positions.device)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[i], x[i + d/2]) of ``x`` (``[num_tokens, heads, head_dim]``) by its angle."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :].to(x.dtype) + rotated * sin[:, None, :].to(x.dtype)


@dataclass
class LayerWeights:
    """One decoder layer's tensors, in ``nn.Linear`` layout ``[out_features, in_features]``."""

    input_norm: torch.Tensor
    q_proj: torch.Tensor
    k_proj: torch.Tensor
    v_proj: torch.Tensor
    o_proj: torch.Tensor
    post_attention_norm: torch.Tensor
    gate_proj: torch.Tensor
    up_proj: torch.Tensor
    down_proj: torch.Tensor


_HF_NAMES = {"input_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             **{n: f"self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj", "o_proj")},
             **{n: f"mlp.{n}" for n in ("gate_proj", "up_proj", "down_proj")}}
"""Each :class:`LayerWeights` field's name in a ``LlamaForCausalLM`` layer (``model.layers.{i}.{name}.weight``)."""


class Llama:
    """The decoder: weights plus a forward over a flat batch of tokens and a paged KV cache."""

    def __init__(self, config: LlamaConfig, embed: torch.Tensor, layers: list[LayerWeights],
                 final_norm: torch.Tensor, lm_head: torch.Tensor) -> None:
        self.config = config
        self.embed = embed
        self.layers = layers
        self.final_norm = final_norm
        self.lm_head = lm_head
        self.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, dict(config.rope_scaling))

    @classmethod
    def from_state_dict(cls, config: LlamaConfig, state: Mapping[str, torch.Tensor]) -> "Llama":
        """Take the tensors of a ``LlamaForCausalLM`` state dict (shared, not copied)."""
        def get(name: str) -> torch.Tensor:
            if name not in state:
                raise KeyError(f"state dict has no {name!r}; is this a LlamaForCausalLM checkpoint?")
            return state[name].detach()

        layers = [LayerWeights(**{field: get(f"model.layers.{i}.{name}.weight") for field, name in _HF_NAMES.items()})
                  for i in range(config.num_layers)]
        embed = get("model.embed_tokens.weight")
        lm_head = embed if config.tie_word_embeddings else get("lm_head.weight")
        return cls(config, embed, layers, get("model.norm.weight"), lm_head)

    @classmethod
    def from_hf(cls, hf_model: Any) -> "Llama":
        """Our decoder over the very tensors of a transformers ``LlamaForCausalLM``."""
        return cls.from_state_dict(LlamaConfig.from_hf(hf_model.config), hf_model.state_dict())

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @torch.inference_mode()
    def forward(self, token_ids: torch.Tensor, meta: StepMetadata, kv: PagedKVCache) -> torch.Tensor:
        """Logits of the *last* token of each sequence in the step, ``[num_seqs, vocab]``.

        ``token_ids`` is ``[num_tokens]``: the new tokens of every sequence, end to end, in
        ``meta``'s order. Their K/V are written to ``kv`` on the way through.
        """
        cfg = self.config
        if token_ids.dim() != 1 or token_ids.shape[0] != meta.num_tokens:
            raise ValueError(f"token_ids must be [num_tokens={meta.num_tokens}], got shape {tuple(token_ids.shape)}")
        n = token_ids.shape[0]
        cos, sin = rope_cos_sin(meta.positions, self.inv_freq)
        h = F.embedding(token_ids, self.embed)
        for i, w in enumerate(self.layers):
            x = rms_norm(h, w.input_norm, cfg.rms_norm_eps)
            q = F.linear(x, w.q_proj).view(n, cfg.num_heads, cfg.head_dim)
            k = F.linear(x, w.k_proj).view(n, cfg.num_kv_heads, cfg.head_dim)
            v = F.linear(x, w.v_proj).view(n, cfg.num_kv_heads, cfg.head_dim)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            kv.write(i, k, v, meta)                      # this step's K/V join the cache ...
            attn = kv.attend(i, q, meta)                 # ... and every query reads its sequence's
            h = h + F.linear(attn.reshape(n, cfg.num_heads * cfg.head_dim), w.o_proj)
            x = rms_norm(h, w.post_attention_norm, cfg.rms_norm_eps)
            h = h + F.linear(F.silu(F.linear(x, w.gate_proj)) * F.linear(x, w.up_proj), w.down_proj)
        last = rms_norm(h[meta.last_token_index], self.final_norm, cfg.rms_norm_eps)
        return F.linear(last, self.lm_head)

    __call__ = forward

    def kv_bytes_per_token(self, dtype: torch.dtype | None = None) -> int:
        """layers x KV heads x head_dim x 2 (K and V) x bytes per element."""
        cfg = self.config
        return kv_bytes_per_token(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, (dtype or self.dtype).itemsize)
