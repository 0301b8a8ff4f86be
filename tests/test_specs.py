"""specs: the KV arithmetic of chapter 0 against the articles, transformers configs and a real cache."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import LlamaConfig

from pagedkv_edu.specs import (DTYPE_BYTES, DTYPES, GIB, KIB, MIB, MODELS, ModelSpec, format_bytes, get_spec,
                               kv_bytes_per_token, load_config, spec_from_config, torch_dtype)

# The shapes as transformers spells them (from the models' config.json), built here, never downloaded.
HF_SHAPES = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         max_position_embeddings=131072),
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=32, vocab_size=32000, tie_word_embeddings=False),
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True),
}


def test_llama_3_2_1b_bf16_needs_32_kib_per_token() -> None:
    """Seed 004: 16 layers x 8 KV heads x 64 dims x 2 x 2 bytes."""
    spec = get_spec("llama-3.2-1b")
    assert spec.dtype == "bf16" and spec.gqa_ratio == 4
    assert spec.kv_bytes_per_token == 32 * KIB == 32768
    assert format_bytes(spec.kv_bytes_per_token) == "32 KiB"
    # Without GQA (one KV head per query head) it would be four times as much.
    mha = dataclasses.replace(spec, num_kv_heads=spec.num_heads)
    assert mha.kv_bytes_per_token == 4 * spec.kv_bytes_per_token


def test_llama_2_7b_fp16_has_14_gb_of_weights_and_hundreds_of_mb_per_request() -> None:
    """Seed 000: 'a typical 7B model in FP16: about 14 GB of weights; one request's KV: hundreds of MB'."""
    spec = get_spec("llama-2-7b")
    assert spec.dtype == "fp16" and spec.gqa_ratio == 1
    assert 6.5e9 < spec.num_parameters < 7e9
    assert spec.weight_bytes == pytest.approx(14e9, rel=0.05)  # 13.5 GB: 'about 14 GB'
    assert spec.kv_bytes_per_token == 32 * 32 * 128 * 2 * 2
    request = spec.kv_bytes(825)  # the seed's typical request: 625 prompt + 200 output tokens
    assert 100 * MIB <= request < 1 * GIB
    # 50 such requests together outgrow the weights, as the seed says.
    assert spec.kv_bytes(825, 50) > spec.weight_bytes


def test_smollm2_135m_per_token_bytes_and_size() -> None:
    spec = get_spec("smollm2-135m")
    assert spec.kv_bytes_per_token == 30 * 3 * 64 * 2 * 2
    assert format_bytes(spec.kv_bytes_per_token) == "22.50 KiB"
    assert 130e6 < spec.num_parameters < 140e6  # its name says 135M


@pytest.mark.parametrize("name", sorted(HF_SHAPES))
def test_spec_from_a_transformers_config_matches_the_named_spec(name) -> None:
    named = get_spec(name)
    config = LlamaConfig(**HF_SHAPES[name])
    assert spec_from_config(config, name=name, dtype=named.dtype) == named
    assert spec_from_config(config.to_dict(), name=name, dtype=named.dtype) == named


@pytest.mark.parametrize("name", sorted(HF_SHAPES))
def test_parameter_count_matches_transformers_llama(name) -> None:
    """num_parameters is counted on the real module, built on the meta device (no memory).

    Two layers are enough to check the formula's per-layer, embedding and head terms for
    each shape (tied or not, GQA or not); the named specs follow from it (test above).
    """
    from transformers import LlamaForCausalLM

    config = LlamaConfig(**{**HF_SHAPES[name], "num_hidden_layers": 2})
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert spec_from_config(config).num_parameters == sum(p.numel() for p in model.parameters())


def test_kv_bytes_per_token_matches_a_real_transformers_cache() -> None:
    """Run a tiny GQA Llama for a few tokens and weigh the K/V tensors its cache holds."""
    from transformers import LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, vocab_size=300)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    spec = spec_from_config(config, dtype="bf16")
    for tokens in (1, 11):
        with torch.no_grad():
            out = model(torch.randint(0, 300, (1, tokens)), use_cache=True)
        cache = getattr(out, "cache", None)  # newer transformers; older 5.x: past_key_values
        cache = out.past_key_values if cache is None else cache
        measured = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
        assert measured == spec.kv_bytes(tokens)


def test_spec_from_config_fills_defaults_like_transformers() -> None:
    """No head_dim: hidden/heads; no num_key_value_heads: plain multi-head; no name: the model type."""
    cfg = dict(model_type="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
               num_attention_heads=8, vocab_size=1000)
    spec = spec_from_config(cfg)
    assert (spec.name, spec.head_dim, spec.num_kv_heads, spec.tie_word_embeddings, spec.dtype) == \
        ("llama", 32, 8, False, "bf16")
    assert spec.kv_bytes_per_token == 2 * 8 * 32 * 2 * 2


def test_kv_bytes_scale_with_tokens_requests_and_dtype() -> None:
    spec = get_spec("llama-3.2-1b")
    assert spec.kv_bytes(0) == 0
    assert spec.kv_bytes(2048, 64) == 2048 * 64 * spec.kv_bytes_per_token
    for dtype, size in DTYPE_BYTES.items():
        other = spec.with_dtype(dtype)
        assert other.kv_bytes_per_token * spec.bytes_per_element == spec.kv_bytes_per_token * size
        assert other.num_parameters == spec.num_parameters
    assert spec.with_dtype("fp32").weight_bytes == 2 * spec.weight_bytes


@pytest.mark.parametrize("tokens, requests", [(-1, 1), (10, -2), (True, 1), (10, 1.0)])
def test_negative_token_or_request_counts_are_refused(tokens, requests) -> None:
    with pytest.raises(ValueError, match="tokens must be" if tokens in (-1, True) else "requests must be"):
        get_spec("llama-3.2-1b").kv_bytes(tokens, requests)


SHAPE = dict(name="x", num_layers=2, num_heads=8, num_kv_heads=2, head_dim=16, hidden_size=128,
             intermediate_size=256, vocab_size=100, tie_word_embeddings=True)


@pytest.mark.parametrize("field", ["num_layers", "num_heads", "num_kv_heads", "head_dim", "hidden_size",
                                   "intermediate_size", "vocab_size"])
@pytest.mark.parametrize("bad", [0, -4, 2.5, True, 2**41])
def test_non_positive_sizes_are_refused_by_name(field, bad) -> None:
    with pytest.raises(ValueError, match=rf"x: {field} must be a whole number in 1\.\.1099511627776, got {bad!r}"):
        ModelSpec(**{**SHAPE, field: bad})


@pytest.mark.parametrize("config, message", [
    ([1, 2], "must be a JSON object .* got a list"),
    ("config", "got a str"),
    ({"num_attention_heads": 4}, "the config has no num_hidden_layers, hidden_size, intermediate_size, vocab_size"),
    ({**dict(num_hidden_layers=2, hidden_size=64, intermediate_size=8, vocab_size=9), "num_attention_heads": 0},
     "num_attention_heads must be a whole number >= 1, got 0"),
    ({**dict(num_hidden_layers=2, hidden_size="64", intermediate_size=8, vocab_size=9), "num_attention_heads": 4},
     "hidden_size must be a whole number >= 1, got '64'"),
])
def test_a_bad_config_is_refused_by_name_before_any_arithmetic(config, message) -> None:
    with pytest.raises(ValueError, match=message):
        spec_from_config(config)


def test_load_config_refuses_what_is_not_a_config_file(tmp_path) -> None:
    with pytest.raises(ValueError, match="is a directory"):
        load_config(tmp_path)
    with pytest.raises(ValueError, match="no such file"):
        load_config(tmp_path / "missing.json")
    (tmp_path / "c.json").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not a readable JSON config"):
        load_config(tmp_path / "c.json")


def test_one_dtype_table_and_one_kv_bytes_formula() -> None:
    import torch

    for name, (torch_name, size) in DTYPES.items():
        assert torch_dtype(name) is getattr(torch, torch_name) and torch_dtype(name).itemsize == size
        assert DTYPE_BYTES[name] == size
    spec = get_spec("smollm2-135m")
    assert spec.kv_bytes_per_token == kv_bytes_per_token(30, 3, 64, 2) == 30 * 3 * 64 * 2 * 2
    with pytest.raises(ValueError, match="'int3'"):
        torch_dtype("int3")


def test_format_bytes_of_an_absurd_size_does_not_overflow() -> None:
    assert format_bytes(10**400) == "about 2**1328 B"


def test_heads_not_divisible_by_kv_heads_and_unknown_dtype_are_refused() -> None:
    with pytest.raises(ValueError, match="num_heads=8 is not a multiple of num_kv_heads=3"):
        ModelSpec(**{**SHAPE, "num_kv_heads": 3})
    with pytest.raises(ValueError, match="'int3'"):
        ModelSpec(**SHAPE, dtype="int3")
    with pytest.raises(ValueError, match="'int3'"):
        get_spec("llama-3.2-1b").with_dtype("int3")


def test_unknown_model_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="'llama-9b'.*" + ", ".join(sorted(MODELS))):
        get_spec("llama-9b")


def test_format_bytes_uses_binary_units() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(32 * KIB) == "32 KiB"
    assert format_bytes(1.5 * GIB) == "1.50 GiB"
    assert format_bytes(3 * MIB + 512 * KIB) == "3.50 MiB"
