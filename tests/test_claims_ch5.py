"""Chapter 5's claims beyond its check cell, recomputed on small inputs through the package.

The notebook asserts its claims on SmolLM2-135M and the Llama-3.2-1B architecture. These pin what
its check cell leaves out, on the tiny random model and bare kernels: the llama3 RoPE bands, the
tile arithmetic of the 51-position decode step, the KV memory of each cache as exact byte counts
(the left padding included), the decoder running through chapter 3's gather, and the bf16 bounds.
"""

from __future__ import annotations

import pytest
import torch

from pagedkv_edu import runtime
from pagedkv_edu.attention import paged_attention
from pagedkv_edu.attention.reference import paged_attention_float64
from pagedkv_edu.engine.generate import generate
from pagedkv_edu.exercises.ch3 import gather_attention
from pagedkv_edu.exercises.ch4_kernel import decode_backend, tiles_visited
from pagedkv_edu.exercises.solutions import ch4_kernel as solution
from pagedkv_edu.exercises.solutions.ch3 import gather_kv as shipped_gather
from pagedkv_edu.model import load_model, loading
from pagedkv_edu.model.llama import LlamaConfig, rope_inv_freq
from pagedkv_edu.model.paged_batch import random_paged_step
from pagedkv_edu.bench.kv_memory import kv_memory, left_padded

TILE, SPLITS = 16, 2
CHAT_PROMPT, NEW = 40, 12    # the chapter's chat prompt and reply; its longest decode step attends over 51 positions


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


def test_llama_3_2_1b_slows_14_of_its_32_rope_frequencies_by_32() -> None:
    cfg = LlamaConfig.from_hf(loading.llama_3_2_1b_config())
    assert dict(cfg.rope_scaling)["factor"] == 32
    slowdown = rope_inv_freq(cfg.head_dim, cfg.rope_theta) / rope_inv_freq(cfg.head_dim, cfg.rope_theta,
                                                                            dict(cfg.rope_scaling))
    kept, slowed = int((slowdown < 1.0001).sum()), int((slowdown > 31.999).sum())
    assert (kept, len(slowdown) - kept - slowed, slowed) == (15, 3, 14)


def test_llama_3_2_1b_holds_32_kib_of_kv_per_token_in_bf16() -> None:
    cfg = LlamaConfig.from_hf(loading.llama_3_2_1b_config())
    assert cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * torch.bfloat16.itemsize == 32 * 1024


def test_the_chat_prompt_spans_three_tiles_and_the_longest_step_two_splits_of_two() -> None:
    longest = CHAT_PROMPT + NEW - 1
    assert -(-CHAT_PROMPT // TILE) == 3 and longest == 51
    assert tiles_visited([longest], SPLITS, TILE) == [2 + 2]          # positions 0..31 and 32..50, two tiles each
    assert tiles_visited([longest], 1, TILE) == [4]                   # the book's kernel: one split, all four


@pytest.mark.parametrize("kernels, splits, most_tiles", [
    ((solution.paged_decode_kernel, solution.merge_splits_kernel), SPLITS, 2),   # the reader's path, 2 splits
    ((None, None), 1, 4),                                                      # the book's kernel, no split
])
def test_a_decode_step_of_51_positions_counts_its_tiles_and_merges(kernels, splits: int, most_tiles: int) -> None:
    backend = decode_backend(*kernels, tile_n=TILE, num_splits=splits, name="counted")
    step = random_paged_step([51, 9], [1, 1], 16, 6, 2, 8, torch.float32, seed=2)
    got = paged_attention(*step.args(), backend=backend)
    torch.testing.assert_close(got.double(), paged_attention_float64(*step.args()), atol=2e-5, rtol=2e-5)
    tiles = backend.tiles
    assert tiles.launches == 1 and tiles.merge_launches == (splits > 1)
    assert tiles.max_tiles_per_program == most_tiles


def test_left_padding_right_aligns_each_prompt_and_masks_only_the_padding() -> None:
    ids, mask = left_padded([[5, 6, 7], [8], [9, 10, 11]], pad_token_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [9, 10, 11]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [1, 1, 1]]
    same, same_mask = left_padded([[1, 2], [3, 4]], pad_token_id=0)
    assert same.tolist() == [[1, 2], [3, 4]] and bool(same_mask.all())   # equal lengths: no padding at all


def test_each_cache_holds_what_its_layout_says(tiny) -> None:
    prompts, new = [[5] * 7, [6] * 20, [7] * 3], 4
    per_token = tiny.model.kv_bytes_per_token()
    paged = generate(tiny.model, prompts, new, block_size=16)
    memory = kv_memory(paged, tiny.hf_model, prompts, tiny.tokenizer.pad_token_id, per_token, new_tokens=new,
                       static_len=256)
    lengths = [len(p) + new - 1 for p in prompts]                     # the last token's K/V is never written
    assert memory.tokens_held == sum(lengths)
    assert all(len(t.block_ids) == -(-t.num_tokens // 16) for t in paged.block_tables)   # no spare block
    assert memory.dynamic == len(prompts) * max(lengths) * per_token  # every row padded to the longest
    assert memory.static == len(prompts) * 256 * per_token            # every row reserved in full
    assert memory.token_bytes < memory.paged < memory.dynamic < memory.static


def test_the_decoder_runs_through_chapter_3s_gather_with_the_torch_paths_tokens(tiny) -> None:
    prompts = [[11, 12, 13, 14, 15], [21, 22, 23]]
    attention = gather_attention(shipped_gather, "shipped_gather", "the shipped gather_kv")
    by_gather = generate(tiny.model, prompts, 4, backend=attention, block_size=4)
    assert by_gather.attention == {"prefill": "custom:shipped_gather", "decode": "custom:shipped_gather"}
    assert by_gather.tokens == generate(tiny.model, prompts, 4, backend="torch", block_size=4).tokens


@pytest.mark.skipif(runtime.BACKEND == "cuda", reason="measures the Triton interpreter")
def test_the_interpreter_truncates_its_casts_to_bf16() -> None:
    from pagedkv_edu.bench import bf16_check

    assert bf16_check.BF16_UNIT == torch.finfo(torch.bfloat16).eps / 2 == 2 ** -8
    assert bf16_check.TRUNCATION_BOUND == 2 ** -7
    cast = bf16_check.cast_error()
    assert cast.differ > cast.n // 4                                   # about half the values differ from torch's
    assert cast.torch_max_relative <= bf16_check.BF16_UNIT < cast.max_relative <= bf16_check.TRUNCATION_BOUND
    err = bf16_check.attention_error(num_heads=4, num_kv_heads=2, head_dim=16)
    assert err.triton < bf16_check.TRUNCATION_BOUND
