"""Where production engines implement each idea of the book (chapter 10).

Each :class:`Implementation` row names a public repository, a file, a class or function in
it, and the commit of the version that was read when the row was written. A row is a claim
about that version only: the projects move fast, files get renamed, and the same feature can
look different a month later. Every note says what the code at that commit does, in our
words; nothing here was copied from documentation or guessed from a function's name.

The book side of each :class:`Concept` is a dotted path (``module:attribute.attribute``)
into ``pagedkv_edu``, resolved by :func:`resolve`; a concept the book does not implement
carries ``None`` and says so in its chapter field. The tests check that every named book symbol imports and that every row
names an allowed project, its repository and a 40-hex commit.
"""

from __future__ import annotations

import html
import importlib
import re
from dataclasses import dataclass
from typing import Any

REPOSITORIES: dict[str, str] = {
    "vLLM": "vllm-project/vllm",
    "FlashInfer": "flashinfer-ai/flashinfer",
    "SGLang": "sgl-project/sglang",
    "nano-vllm": "GeeeekExplorer/nano-vllm",
    "transformers": "huggingface/transformers",
}
"""The projects the chapter compares, and the GitHub repository of each."""

PROJECTS: tuple[str, ...] = tuple(REPOSITORIES)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Concept:
    """One idea of the book and the ``pagedkv_edu`` object that implements it (if any yet)."""

    key: str
    title: str
    chapter: str  # "2", or "6 (planned)" while the chapter's module is not written
    book_symbol: str | None  # "pagedkv_edu.module:Attr.attr"; None while planned

    def __post_init__(self) -> None:
        if self.book_symbol is None and not ("planned" in self.chapter or "not in the book" in self.chapter):
            raise ValueError(f"concept {self.key!r} has no book symbol but its chapter {self.chapter!r} "
                             "says neither 'planned' nor 'not in the book'")
        if self.book_symbol is not None and not self.book_symbol.startswith("pagedkv_edu"):
            raise ValueError(f"book symbol {self.book_symbol!r} of {self.key!r} is outside pagedkv_edu")


@dataclass(frozen=True)
class Implementation:
    """Where one project implements (or does differently) one concept, at one commit."""

    concept: str
    project: str
    repo: str
    path: str
    symbol: str
    commit: str
    note: str

    def __post_init__(self) -> None:
        if self.project not in REPOSITORIES:
            raise ValueError(f"unknown project {self.project!r}; choose one of {', '.join(PROJECTS)}")
        if self.repo != REPOSITORIES[self.project]:
            raise ValueError(f"{self.project} lives in {REPOSITORIES[self.project]}, not {self.repo!r}")
        if not _COMMIT.match(self.commit):
            raise ValueError(f"commit {self.commit!r} of {self.project} {self.path} is not 40 lowercase hex digits")
        for name in ("path", "symbol", "note"):
            if not getattr(self, name).strip():
                raise ValueError(f"{self.project} row for {self.concept!r} has an empty {name}")

    @property
    def url(self) -> str:
        """A permalink to the file at the commit that was read."""
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}"


CONCEPTS: tuple[Concept, ...] = (
    Concept("kv-bytes", "KV bytes per token and blocks per GPU", "0", "pagedkv_edu.specs:ModelSpec.kv_bytes_per_token"),
    Concept("layout", "The layout of the cache tensor", "3", "pagedkv_edu.kv_cache:PagedKVCache"),
    Concept("block-pool", "The block pool and its free list", "2", "pagedkv_edu.block_pool:BlockPool"),
    Concept("block-table", "Block tables and the slot mapping", "2", "pagedkv_edu.block_table:BlockTable.slot_mapping"),
    Concept("store", "Writing new K and V into their slots", "3",
            "pagedkv_edu.attention.triton_store:store_kv_kernel"),
    Concept("decode", "The paged decode-attention kernel and split-K", "4",
            "pagedkv_edu.attention.triton_decode:paged_decode_kernel"),
    Concept("split-k", "How many splits: the split-K heuristic", "4",
            "pagedkv_edu.attention.triton_decode:choose_num_splits"),
    Concept("gqa", "GQA: one program per KV head, not per query head", "4",
            "pagedkv_edu.attention.triton_decode:launch_config"),
    Concept("admission", "Admission and the watermark", "6", "pagedkv_edu.block_manager:BlockManager.can_allocate"),
    Concept("preemption", "Continuous batching and preemption (recompute or swap)", "6",
            "pagedkv_edu.scheduler:Scheduler"),
    Concept("sharing", "Reference counts, fork and copy-on-write", "7", "pagedkv_edu.block_manager:BlockManager.fork"),
    Concept("prefix", "Automatic prefix caching: hashing, lookup, eviction", "8",
            "pagedkv_edu.prefix_cache:PrefixCache.lookup"),
    Concept("block-size", "Choosing a block size", "9", "pagedkv_edu.block_size:sweep"),
    Concept("cuda-graph", "CUDA graphs for decode", "not in the book", None),
)

# Commits of the files read. One constant per file, so a row cannot cite the wrong version.
_V_SPEC = "bc8282e61df21719b12b391c3a976b1c900dfbb4"  # vllm/v1/kv_cache_interface.py
_V_UTILS = "bbf906a88ba1a39104884c88c9811a4f968e4659"  # vllm/v1/core/kv_cache_utils.py
_V_POOL = "c59cb7941357443da7c5eef75cfa8697d683d228"  # vllm/v1/core/block_pool.py
_V_MANAGER = "ace980e6de0540f49b0c63248437a1a7807590c1"  # vllm/v1/core/kv_cache_manager.py
_V_SINGLE = "129ab7c60cbb8eb11e875373e67f7e521b74aa30"  # vllm/v1/core/single_type_kv_cache_manager.py
_V_SCHED = "b4622cf924bc72504aed99e486062d6633fde39e"  # vllm/v1/core/sched/scheduler.py
_V_TABLE = "a4cd9d0d28bdb41db8dfe0acdafac2bf2f608630"  # vllm/v1/worker/block_table.py
_V_CACHE_CU = "693083ae80680811c9c2a22edad2568e6635e190"  # csrc/cache_kernels.cu
_V_ATTN_CU = "5bc0e56c7a30800631543dd1a447e4e44fbd5bba"  # csrc/attention/attention_kernels.cuh
_V_TRITON = "1e8e86046cc3dd62fff2baaca4a97f0c36c8bf1e"  # vllm/attention/ops/triton_decode_attention.py
_V_MLA = "19834c445d4b9e115dfad9166e11a2d136fab251"  # vllm/v1/attention/backends/mla/triton_mla.py
_V_V0 = "a02da52a6cdd9f083e652847ebf6aa95cb8216d0"  # vllm/core/block_manager_v1.py
_V_GRAPH = "a86ed33ec4cf15a7e908bd38466a99927a2e21ba"  # vllm/compilation/cuda_graph.py
_V_CONFIG = "c1d86421174a87056edc90a41dc9942391509e84"  # vllm/config/cache.py
_V_SAMPLING = "491d923514ad9c40e665dc8deae57dd377cb88b0"  # vllm/v1/engine/parallel_sampling.py
_S_POOL = "000ccdba94d4ed75d4fab7b1dac5f8ebcaaee7e8"  # python/sglang/srt/mem_cache/memory_pool.py
_S_ALLOC = "02e29cb18ae1626521ef3baaaead10217f94fc20"  # python/sglang/srt/mem_cache/allocator.py
_S_RADIX = "006b0e3d317f1cd4a7300e919a4eaa878b1947e7"  # python/sglang/srt/mem_cache/radix_cache.py
_S_DECODE = "03cd2ec4af85b66be8ef025238bc73c165416bdb"  # .../layers/attention/triton_ops/decode_attention.py
_S_BACKEND = "00858422264b0552a4c0a21a9949c3986d0dec97"  # .../layers/attention/triton_backend.py
_S_META = "bdd1bcdf4715964dddaa81acc590bd3b74a45acc"  # .../layers/attention/triton_ops/metadata.py
_S_POLICY = "00550cd11b35def9d584bf761a1e32729c20a21d"  # python/sglang/srt/managers/schedule_policy.py
_S_BATCH = "fd3907ee4618e96b73ee94d9a836db78efb5d046"  # python/sglang/srt/managers/schedule_batch.py
_S_GRAPH = "0021673cd18b64f44373950249ff07177e493b4b"  # python/sglang/srt/model_executor/cuda_graph_runner.py
_F_DECODE = "6b1a33f00684860c76c0eda91a240e33c2e3d164"  # flashinfer/decode.py
_F_PAGE = "d60935692b50bfb201f087c11850cb94265b4e6b"  # flashinfer/page.py
_F_SCHED = "24fd9fc7a944723897cc46a60bf39703ab2813a6"  # include/flashinfer/attention/scheduler.cuh
_N_BLOCKS = "2f352aea436c1d8c49a6c15f67b40bb32c0c2a8c"  # nanovllm/engine/block_manager.py
_N_SCHED = "06005bd4602e0dc6e4c80e64c159658dbc468fae"  # nanovllm/engine/scheduler.py, nanovllm/config.py
_N_RUNNER = "359f8cadd54537687378247c437def9aafbd0faa"  # nanovllm/engine/model_runner.py
_N_ATTN = "2d9b51b1f97660e39bc34dda0c87d28aced3b09d"  # nanovllm/layers/attention.py
_T_CACHE = "3f17daf89935cfac6c1b70500cf9bd5720f2c14e"  # .../continuous_batching/cache.py
_T_ALLOC = "c8f825767e09cab6aa48921fee4baead4a188209"  # .../continuous_batching/cache_manager.py
_T_SCHED = "9f84789d9a6a13ce7ddf2e57a940db5bb1ea4c50"  # .../continuous_batching/scheduler.py
_T_API = "e596da4a861e39bf3c9d97f01a13aad3ac522ea3"  # .../continuous_batching/continuous_api.py

_VLLM, _FI, _SGL, _NANO, _HF = (REPOSITORIES[p] for p in PROJECTS)
_HF_CB = "src/transformers/generation/continuous_batching/"
_SGL_SRT = "python/sglang/srt/"


def _row(concept: str, project: str, path: str, symbol: str, commit: str, note: str) -> Implementation:
    return Implementation(concept, project, REPOSITORIES[project], path, symbol, commit, note)


IMPLEMENTATIONS: tuple[Implementation, ...] = (
    # --- KV bytes per token ---------------------------------------------------------------
    _row("kv-bytes", "vLLM", "vllm/v1/kv_cache_interface.py", "AttentionSpec.real_page_size_bytes", _V_SPEC,
         "Bytes of one block of one layer: 2 x block_size x num_kv_heads x head_size x dtype size. "
         "FullAttentionSpec overrides it so V may have a different head size from K."),
    _row("kv-bytes", "vLLM", "vllm/v1/core/kv_cache_utils.py", "get_num_blocks", _V_UTILS,
         "Blocks per GPU = available_memory // page_size // num_layers: the budget is divided evenly "
         "between layers, one tensor per layer."),
    _row("kv-bytes", "nano-vllm", "nanovllm/engine/model_runner.py", "ModelRunner.allocate_kv_cache", _N_RUNNER,
         "block_bytes = 2 x layers x block_size x kv_heads x head_dim x itemsize; the memory budget, after "
         "the peak of a warm-up run, // block_bytes gives the number of blocks."),
    _row("kv-bytes", "SGLang", f"{_SGL_SRT}mem_cache/memory_pool.py", "MHATokenToKVPool._create_buffers", _S_POOL,
         "Sizes the cache in tokens, not blocks: one [size + page_size, head_num, head_dim] buffer per layer "
         "for K and one for V; get_kv_size_bytes logs what they cost."),
    _row("kv-bytes", "transformers", f"{_HF_CB}cache.py",
         "PagedAttentionMemoryHandler.compute_num_blocks_and_max_batch_tokens", _T_CACHE,
         "Per-token cache bytes 2 x heads x head_dim x layers x itemsize, budgeted together with the "
         "activations of max_batch_tokens by solving a quadratic in the cache size."),
    # --- layout ---------------------------------------------------------------------------
    _row("layout", "vLLM", "csrc/cache_kernels.cu", "reshape_and_cache_flash", _V_CACHE_CU,
         "The NHD layout the book uses: key and value caches [num_blocks, block_size, num_heads, head_size]."),
    _row("layout", "vLLM", "csrc/attention/attention_kernels.cuh", "paged_attention_kernel", _V_ATTN_CU,
         "The original layout: K [num_blocks, num_kv_heads, head_size/x, block_size, x] with "
         "x = 16 / sizeof(cache_t), so a thread group loads 16 bytes of a key at a time; "
         "V is [num_blocks, num_kv_heads, head_size, block_size]."),
    _row("layout", "FlashInfer", "flashinfer/page.py", "append_paged_kv_cache", _F_PAGE,
         "Accepts NHD [pages, page_size, kv_heads, head_dim] or HND [pages, kv_heads, page_size, head_dim], "
         "as a (k, v) pair or one tensor with K and V in dimension 1."),
    _row("layout", "nano-vllm", "nanovllm/engine/model_runner.py", "ModelRunner.allocate_kv_cache", _N_RUNNER,
         "One tensor [2, layers, blocks, block_size, kv_heads, head_dim]; each attention layer gets views "
         "of its K and V slices."),
    _row("layout", "SGLang", f"{_SGL_SRT}mem_cache/memory_pool.py", "MHATokenToKVPool._create_buffers", _S_POOL,
         "Token-major [slots, heads, head_dim] per layer; slot 0 is a dummy that padded tokens write to."),
    _row("layout", "transformers", f"{_HF_CB}cache.py", "PagedAttentionCache.__init__", _T_CACHE,
         "At this commit: [num_kv_heads, num_blocks, block_size, head_dim] per layer, heads outermost."),
    # --- block pool -----------------------------------------------------------------------
    _row("block-pool", "vLLM", "vllm/v1/core/block_pool.py", "BlockPool.get_new_blocks", _V_POOL,
         "Blocks carry ref_cnt; allocation pops from the head of the free queue. Block 0 is taken out at "
         "start as a null placeholder."),
    _row("block-pool", "vLLM", "vllm/v1/core/kv_cache_utils.py", "FreeKVCacheBlockQueue", _V_UTILS,
         "The free list is a doubly linked list threaded through the blocks themselves "
         "(prev_free_block, next_free_block), so remove() from the middle is O(1) and allocates no objects."),
    _row("block-pool", "vLLM", "vllm/v1/core/block_pool.py", "BlockPool.free_blocks", _V_POOL,
         "At this commit freed blocks without a hash go to the front of the queue (reused first) and "
         "hashed ones to the back (kept longer for prefix hits)."),
    _row("block-pool", "vLLM", "vllm/v1/core/block_pool.py", "BlockPool.get_usage", _V_POOL,
         "Usage = 1 - free / (total - 1): the null block is not counted."),
    _row("block-pool", "nano-vllm", "nanovllm/engine/block_manager.py", "BlockManager", _N_BLOCKS,
         "A deque of free block ids, a set of used ids and a ref_count per Block: the book's pool at the "
         "same scale."),
    _row("block-pool", "SGLang", f"{_SGL_SRT}mem_cache/allocator.py", "TokenToKVPoolAllocator", _S_ALLOC,
         "The free list is a tensor of free slot indices, one per token (page_size 1); "
         "PagedTokenToKVPoolAllocator in the same file hands out whole pages."),
    _row("block-pool", "transformers", f"{_HF_CB}cache.py", "PagedAttentionCache.allocate_blocks", _T_CACHE,
         "deque(range(num_blocks)); allocation pops from the left, freeing extends on the right."),
    _row("block-pool", "FlashInfer", "flashinfer/decode.py", "BatchDecodeWithPagedKVCacheWrapper.plan", _F_DECODE,
         "No allocator: FlashInfer is a kernel library and takes the page indices the caller allocated."),
    # --- block table and slot mapping -----------------------------------------------------
    _row("block-table", "vLLM", "vllm/v1/worker/block_table.py", "BlockTable.compute_slot_mapping", _V_TABLE,
         "block_table[req, pos // block_size] * block_size + pos % block_size, vectorised with numpy over "
         "every token of the step; -1 marks tokens another context-parallel rank stores."),
    _row("block-table", "nano-vllm", "nanovllm/engine/model_runner.py", "ModelRunner.prepare_decode", _N_RUNNER,
         "Decode slot = block_table[-1] * block_size + last_block_num_tokens - 1; prepare_block_tables "
         "pads the tables with -1 into one int32 tensor."),
    _row("block-table", "SGLang", f"{_SGL_SRT}mem_cache/memory_pool.py", "ReqToTokenPool", _S_POOL,
         "req_to_token is [requests, max_context_len] and stores a slot per token, not a block per "
         "block_size tokens: with page size 1 the block table is a token table."),
    _row("block-table", "FlashInfer", "flashinfer/decode.py", "BatchDecodeWithPagedKVCacheWrapper.plan", _F_DECODE,
         "A CSR page table: kv_indptr [batch + 1], kv_indices (every request's pages back to back) and "
         "kv_last_page_len [batch]; no padding to the longest table."),
    _row("block-table", "FlashInfer", "flashinfer/page.py", "get_seq_lens", _F_PAGE,
         "Length from the CSR table: (pages - 1) x page_size + last_page_len."),
    _row("block-table", "transformers", f"{_HF_CB}cache_manager.py", "FullAttentionCacheAllocator.get_write_indices",
         _T_ALLOC, "block_table[i // block_size] * block_size + i % block_size, built in a Python loop per request."),
    _row("block-table", "transformers", f"{_HF_CB}continuous_api.py",
         "ContinuousBatchProcessor.prepare_next_batch", _T_API,
         "Builds write_index (the new tokens' slots) and read_index (every slot of the sequence) each step."),
    # --- store kernel ---------------------------------------------------------------------
    _row("store", "vLLM", "csrc/cache_kernels.cu", "reshape_and_cache_flash_kernel", _V_CACHE_CU,
         "One CUDA block per token, threads over heads x head_size; a negative slot is padding and the "
         "block returns. Optional fp8 conversion on the way in."),
    _row("store", "vLLM", "csrc/cache_kernels.cu", "reshape_and_cache_kernel", _V_CACHE_CU,
         "The same write into the original x-split key layout."),
    _row("store", "nano-vllm", "nanovllm/layers/attention.py", "store_kvcache_kernel", _N_ATTN,
         "A Triton program per token copies num_heads x head_dim elements to slot * D; `if slot == -1: return`."),
    _row("store", "SGLang", f"{_SGL_SRT}mem_cache/memory_pool.py", "MHATokenToKVPool.set_kv_buffer", _S_POOL,
         "No custom kernel: k_buffer[layer][loc] = cache_k, with loc the batch's out_cache_loc slots."),
    _row("store", "FlashInfer", "flashinfer/page.py", "append_paged_kv_cache", _F_PAGE,
         "Takes each new token's (batch index, position) and the CSR page table instead of a slot mapping."),
    _row("store", "transformers", f"{_HF_CB}cache.py", "PagedAttentionCache.update", _T_CACHE,
         "Indexed assignment k_cache_flat[:, write_index, :] = key_states[0], then returns the cache gathered "
         "at read_index."),
    # --- decode attention -----------------------------------------------------------------
    _row("decode", "vLLM", "csrc/attention/attention_kernels.cuh", "paged_attention_kernel", _V_ATTN_CU,
         "Grid (num_heads, num_seqs, max_num_partitions); PARTITION_SIZE > 0 is the split (v2) variant, "
         "which stores each partition's max logit and exp sum for a reduce kernel."),
    _row("decode", "vLLM", "vllm/attention/ops/triton_decode_attention.py", "_fwd_kernel_stage1", _V_TRITON,
         "Adapted from SGLang's kernel (the file says so) with page size >= 1: page = table[pos // PAGE_SIZE], "
         "online softmax in fp32, each split stores its output and log-sum-exp; _fwd_kernel_stage2 merges."),
    _row("decode", "SGLang", f"{_SGL_SRT}layers/attention/triton_ops/decode_attention.py", "_fwd_kernel_stage1",
         _S_DECODE, "Page size 1: a sequence's slots are kv_indices[kv_indptr[b]:kv_indptr[b+1]]; each split's "
         "length is rounded up to a multiple of MIN_BLOCK_KV = 32 tokens."),
    _row("decode", "FlashInfer", "flashinfer/decode.py", "BatchDecodeWithPagedKVCacheWrapper", _F_DECODE,
         "plan() once per batch on the host, run() per layer; a float workspace buffer holds the split-k "
         "partial results."),
    _row("decode", "nano-vllm", "nanovllm/layers/attention.py", "Attention.forward", _N_ATTN,
         "No kernel of its own: decode calls flash-attn's flash_attn_with_kvcache with cache_seqlens and "
         "block_table."),
    # --- split-K heuristic ----------------------------------------------------------------
    _row("split-k", "SGLang", f"{_SGL_SRT}layers/attention/triton_backend.py", "TritonAttnBackend.get_num_kv_splits",
         _S_BACKEND, "A split count per sequence, computed on the GPU each step; a fixed tile "
         "(SGLANG_TRITON_DECODE_SPLIT_TILE_SIZE, default 256) in deterministic mode; max_kv_splits for all "
         "when static splits are asked for."),
    _row("split-k", "SGLang", f"{_SGL_SRT}layers/attention/triton_ops/metadata.py", "get_num_kv_splits_triton",
         _S_META, "Takes the larger of two counts: one from the spread of lengths in the batch (max / min), one "
         "from the SM count scaled up with log2(max_len / 64) over the programs the grid already has."),
    _row("split-k", "vLLM", "vllm/v1/attention/backends/mla/triton_mla.py", "TritonMLAImpl._forward_decode",
         _V_MLA, "At this commit a constant: `num_kv_splits = 4  # TODO: heuristic`."),
    _row("split-k", "vLLM", "vllm/attention/ops/triton_decode_attention.py", "_decode_att_m_fwd", _V_TRITON,
         "NUM_KV_SPLITS is a constexpr of the kernel: every sequence of the batch gets the same number of splits."),
    _row("split-k", "FlashInfer", "include/flashinfer/attention/scheduler.cuh",
         "BatchDecodeWithPagedKVCacheWorkEstimationDispatched", _F_SCHED,
         "No split when batch x kv_heads already fills max_grid_size (occupancy x SMs); otherwise "
         "PartitionPagedKVCacheBinarySearchMinNumPagePerBatch finds the smallest chunk (at least "
         "128 / page_size pages) that keeps the grid within it, and splits only if that cuts a sequence, "
         "except under CUDA graphs, where it then always takes the split kernel."),
    # --- GQA ------------------------------------------------------------------------------
    _row("gqa", "vLLM", "csrc/attention/attention_kernels.cuh", "paged_attention_kernel", _V_ATTN_CU,
         "One thread block per query head (head_idx = blockIdx.x, kv_head_idx = head_idx / num_queries_per_kv): "
         "the query heads of a group each read the same K and V."),
    _row("gqa", "SGLang", f"{_SGL_SRT}layers/attention/triton_ops/decode_attention.py",
         "_fwd_grouped_kernel_stage1", _S_DECODE,
         "Up to BLOCK_H query heads of one KV head share a program, so a K/V tile is loaded once and used in "
         "a tl.dot for all of them."),
    _row("gqa", "vLLM", "vllm/attention/ops/triton_decode_attention.py", "_decode_grouped_att_m_fwd", _V_TRITON,
         "The same grouping with BLOCK_H = 16."),
    _row("gqa", "FlashInfer", "include/flashinfer/attention/scheduler.cuh",
         "BatchDecodeWithPagedKVCacheWorkEstimationDispatched", _F_SCHED,
         "bdy = GROUP_SIZE: the y dimension of a thread block is the GQA group, so one block serves every "
         "query head of a KV head."),
    _row("gqa", "FlashInfer", "flashinfer/decode.py", "BatchDecodeWithPagedKVCacheWrapper.__init__", _F_DECODE,
         "use_tensor_cores=True, documented as faster for large group sizes in GQA."),
    # --- admission ------------------------------------------------------------------------
    _row("admission", "vLLM", "vllm/core/block_manager_v1.py", "BlockSpaceManagerV1.can_allocate", _V_V0,
         "The v0 block manager: watermark = 0.01 of the GPU blocks must stay free after admission; answers "
         "OK, LATER or NEVER (NEVER if the prompt could not fit even in an empty pool)."),
    _row("admission", "vLLM", "vllm/v1/core/kv_cache_manager.py", "KVCacheManager.allocate_slots", _V_MANAGER,
         "v1 asks only whether the new blocks fit: it returns None when num_blocks_to_allocate exceeds the "
         "free blocks. We saw no watermark in it."),
    _row("admission", "nano-vllm", "nanovllm/engine/block_manager.py", "BlockManager.can_allocate", _N_BLOCKS,
         "len(free_block_ids) >= seq.num_blocks, and can_append needs a free block only when the last one is full."),
    _row("admission", "SGLang", f"{_SGL_SRT}managers/schedule_policy.py", "PrefillAdder", _S_POLICY,
         "Reserves room for the running requests' future tokens: min(max_new_tokens - generated, CLIP) x "
         "new_token_ratio each, before admitting a prefill."),
    _row("admission", "transformers", f"{_HF_CB}scheduler.py", "FIFOScheduler.schedule_batch", _T_SCHED,
         "safety_margin = 0.2: with fewer than 20% of blocks free it schedules only decoding requests (and "
         "at most the first prefill)."),
    # --- scheduler and preemption ---------------------------------------------------------
    _row("preemption", "vLLM", "vllm/v1/core/sched/scheduler.py", "Scheduler.schedule", _V_SCHED,
         "Running requests first; when allocate_slots fails it preempts the last request of self.running "
         "(the lowest priority under the priority policy) and retries."),
    _row("preemption", "vLLM", "vllm/v1/core/sched/scheduler.py", "Scheduler._preempt_request", _V_SCHED,
         "Recompute: frees the blocks, sets num_computed_tokens = 0 and puts the request at the front of the "
         "waiting queue."),
    _row("preemption", "vLLM", "vllm/core/block_manager_v1.py", "BlockSpaceManagerV1.swap_out", _V_V0,
         "The v0 alternative, swap: a sequence group's block tables move from the GPU allocator to the CPU "
         "one (swap_in moves them back). csrc/cache_kernels.cu has swap_blocks, one cudaMemcpyAsync per block."),
    _row("preemption", "nano-vllm", "nanovllm/engine/scheduler.py", "Scheduler.schedule", _N_SCHED,
         "Prefill first if a waiting sequence fits; at decode, while can_append fails it preempts the sequence "
         "at the back of the running queue. Scheduler.preempt deallocates and re-queues at the front."),
    _row("preemption", "SGLang", f"{_SGL_SRT}managers/schedule_batch.py", "ScheduleBatch.retract_decode", _S_BATCH,
         "Retracts the request with the fewest generated tokens (the longest prompt on ties) until the next "
         "decode fits; its KV is freed without entering the radix tree; returns a new new_token_ratio."),
    _row("preemption", "transformers", f"{_HF_CB}continuous_api.py", "ContinuousBatchProcessor.update_batch",
         _T_API, "At this commit no preemption: the scheduler skips requests it cannot allocate for, and "
         "update_batch raises ValueError('No more free blocks') when the pool is empty."),
    # --- sharing --------------------------------------------------------------------------
    _row("sharing", "vLLM", "vllm/core/block_manager_v1.py", "BlockSpaceManagerV1.fork", _V_V0,
         "v0: the child copies the parent's block table and every block's ref_count goes up by one; no block "
         "is allocated."),
    _row("sharing", "vLLM", "vllm/core/block_manager_v1.py", "BlockSpaceManagerV1.append_slots", _V_V0,
         "v0 copy-on-write: appending to a shared last block allocates a new block and returns the "
         "(old, new) pair to copy."),
    _row("sharing", "vLLM", "csrc/cache_kernels.cu", "copy_blocks", _V_CACHE_CU,
         "The copy behind copy-on-write: one CUDA block per (layer, block pair)."),
    _row("sharing", "vLLM", "vllm/v1/engine/parallel_sampling.py", "ParentRequest.get_child_info", _V_SAMPLING,
         "v1 turns a request with n > 1 into n child requests with n = 1; we found no fork in the v1 block pool."),
    _row("sharing", "nano-vllm", "nanovllm/engine/block_manager.py", "BlockManager.allocate", _N_BLOCKS,
         "A cache hit on a block in use only increments ref_count. Only full blocks are hashed, so a shared "
         "block is never the one being appended to; the file has no copy-on-write."),
    _row("sharing", "SGLang", f"{_SGL_SRT}mem_cache/radix_cache.py", "RadixCache.inc_lock_ref", _S_RADIX,
         "Sharing is counted per tree node: lock_ref is raised on every node from a request's last node up "
         "to the root, and only unlocked leaves can be evicted."),
    # --- prefix caching -------------------------------------------------------------------
    _row("prefix", "vLLM", "vllm/v1/core/kv_cache_utils.py", "hash_block_tokens", _V_UTILS,
         "hash_function((parent_block_hash, tuple(tokens), extra_keys)): a chain, so a block's hash names its "
         "whole prefix. Extra keys carry the LoRA id, multimodal hashes and a cache salt."),
    _row("prefix", "vLLM", "vllm/v1/core/kv_cache_utils.py", "hash_request_tokens", _V_UTILS,
         "Hashes full blocks only: the loop stops at the first partial block."),
    _row("prefix", "vLLM", "vllm/v1/core/kv_cache_manager.py", "KVCacheManager.get_computed_blocks", _V_MANAGER,
         "`max_cache_hit_length = request.num_tokens - 1`: the last token is always recomputed to get logits, "
         "which can cost a whole block because hits are block-aligned."),
    _row("prefix", "vLLM", "vllm/v1/core/block_pool.py", "BlockPool.touch", _V_POOL,
         "A hit on a free block (ref_cnt 0) takes it out of the middle of the free queue, then ref_cnt += 1."),
    _row("prefix", "vLLM", "vllm/v1/core/block_pool.py", "BlockPool._maybe_evict_cached_block", _V_POOL,
         "Lazy eviction: a freed block keeps its hash and stays findable; get_new_blocks drops the hash only "
         "when it hands the block out again."),
    _row("prefix", "vLLM", "vllm/v1/core/single_type_kv_cache_manager.py", "SingleTypeKVCacheManager.free",
         _V_SINGLE, "Frees a request's blocks in reverse, so its tail blocks enter the free queue ahead of its "
         "prefix blocks and are evicted first."),
    _row("prefix", "vLLM", "vllm/config/cache.py", "CacheConfig.enable_prefix_caching", _V_CONFIG,
         "Documented as enabled by default for v1; prefix_caching_hash_algo is sha256 or sha256_cbor."),
    _row("prefix", "nano-vllm", "nanovllm/engine/block_manager.py", "BlockManager.compute_hash", _N_BLOCKS,
         "xxh64 over the previous block's hash (8 bytes) and the token ids; allocate() also compares token ids, "
         "so a hash collision is a miss, not a wrong hit."),
    _row("prefix", "nano-vllm", "nanovllm/engine/block_manager.py", "BlockManager.allocate", _N_BLOCKS,
         "Freed blocks stay in hash_to_block_id until reused (lazy, like vLLM). We found no num_tokens - 1 cap "
         "in allocate() at this commit."),
    _row("prefix", "SGLang", f"{_SGL_SRT}mem_cache/radix_cache.py", "RadixCache.match_prefix", _S_RADIX,
         "RadixAttention's radix tree over token ids (whole pages when page_size > 1), namespaced by an extra "
         "key; a match that ends inside a node splits it."),
    _row("prefix", "SGLang", f"{_SGL_SRT}mem_cache/radix_cache.py", "RadixCache.evict", _S_RADIX,
         "Pops unlocked leaves from a heap ordered by the eviction strategy (lru, lfu, fifo, mru, filo or "
         "priority) and pushes a parent once it becomes a leaf."),
    _row("prefix", "SGLang", f"{_SGL_SRT}managers/schedule_policy.py", "SchedulePolicy.calc_priority", _S_POLICY,
         "Cache-aware ordering of the waiting queue, e.g. lpm (longest prefix match); falls back to FCFS when "
         "more than 128 requests wait."),
    # --- block size -----------------------------------------------------------------------
    _row("block-size", "vLLM", "vllm/config/cache.py", "CacheConfig.block_size", _V_CONFIG,
         "BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]; no static default, the platform sets it; the "
         "docstring says CUDA supports block sizes up to 32."),
    _row("block-size", "vLLM", "vllm/v1/worker/block_table.py", "BlockTable.map_to_kernel_blocks", _V_TABLE,
         "The allocation block may be a multiple of the kernel's block: each allocated block is split into "
         "block_size / kernel_block_size kernel blocks."),
    _row("block-size", "nano-vllm", "nanovllm/config.py", "Config.kvcache_block_size", _N_SCHED,
         "Default 256, and __post_init__ asserts it is a multiple of 256."),
    _row("block-size", "SGLang", f"{_SGL_SRT}mem_cache/radix_cache.py", "page_align_keys", _S_RADIX,
         "With page_size > 1 only whole pages enter or match the radix tree."),
    _row("block-size", "transformers", f"{_HF_CB}cache.py", "PagedAttentionCache.__init__", _T_CACHE,
         "block_size from the generation config, 32 if unset."),
    # --- CUDA graphs ----------------------------------------------------------------------
    _row("cuda-graph", "vLLM", "vllm/compilation/cuda_graph.py", "CUDAGraphWrapper", _V_GRAPH,
         "Captures one graph per batch descriptor, FULL or PIECEWISE, and replays it; the inputs must live in "
         "persistent buffers kept by the caller."),
    _row("cuda-graph", "SGLang", f"{_SGL_SRT}model_executor/cuda_graph_runner.py", "get_batch_sizes_to_capture",
         _S_GRAPH, "By default captures decode at batch sizes 1, 2, 4, 8, then 16 to 160 in steps of 8 (more on "
         "GPUs over 96 GB); CudaGraphRunner.can_run accepts any batch up to the largest captured size unless "
         "padding is disabled."),
    _row("cuda-graph", "nano-vllm", "nanovllm/engine/model_runner.py", "ModelRunner.capture_cudagraph", _N_RUNNER,
         "Graphs for batch sizes [1, 2, 4, 8] + range(16, max_bs + 1, 16); run_model pads slot_mapping with -1 "
         "and runs prefill and batches over 512 eagerly."),
    _row("cuda-graph", "FlashInfer", "flashinfer/decode.py", "BatchDecodeWithPagedKVCacheWrapper.__init__",
         _F_DECODE, "use_cuda_graph=True fixes the batch size and copies indptr/indices/last_page_len into "
         "caller-owned buffers; plan() must stay outside the graph."),
    _row("cuda-graph", "transformers", f"{_HF_CB}continuous_api.py", "ContinuousBatchingManager.warmup", _T_API,
         "use_cuda_graph (default True on CUDA) captures the first step and replays it afterwards."),
)

NOT_VERIFIED: tuple[str, ...] = (
    "Which decode kernel transformers' continuous batching calls: PagedAttentionCache.update returns the "
    "gathered K/V, and we did not follow it into the attention implementations.",
    "The partition size vLLM's v2 CUDA kernel uses and when it prefers v2 over v1: the launcher was not read.",
    "Default values of SGLang's page_size and eviction_policy server arguments: server_args.py was not read.",
    "Where vLLM's v1 FlashAttention backend chooses its split count: only the Triton MLA backend was read.",
    "Whether the nano-vllm versions in the index are all upstream commits: its stored history mixes "
    "versions, some with comments in other languages; where we read two versions of a file, the lines "
    "the rows rely on were the same in both.",
)
"""Claims the chapter does not make because the source was not read."""


def concept(key: str) -> Concept:
    """The concept called ``key``."""
    for c in CONCEPTS:
        if c.key == key:
            return c
    raise KeyError(f"no concept {key!r}; choose one of {', '.join(c.key for c in CONCEPTS)}")


def rows_for(key: str) -> tuple[Implementation, ...]:
    """Every implementation row of concept ``key``, in table order."""
    concept(key)
    return tuple(r for r in IMPLEMENTATIONS if r.concept == key)


def resolve(book_symbol: str) -> Any:
    """Import ``"package.module:Attr.attr"`` and return the object it names."""
    module_name, _, attrs = book_symbol.partition(":")
    if not module_name or not attrs:
        raise ValueError(f"book symbol {book_symbol!r} is not of the form 'module:attribute'")
    obj: Any = importlib.import_module(module_name)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


def coverage() -> dict[str, dict[str, int]]:
    """Rows per concept and project: which project shows each idea, and how often."""
    return {c.key: {p: sum(r.project == p for r in rows_for(c.key)) for p in PROJECTS} for c in CONCEPTS}


def html_table(key: str) -> str:
    """Concept ``key``'s rows as an HTML table with permalinks (notebook outputs and the rendered book)."""
    def cell(text: str) -> str:
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))

    head = "".join(f"<th>{h}</th>" for h in ("project", "file", "symbol", "commit", "what it does"))
    body = "".join(
        f'<tr><td>{r.project}</td><td><a href="{html.escape(r.url)}"><code>{html.escape(r.path)}</code></a></td>'
        f"<td><code>{html.escape(r.symbol)}</code></td><td><code>{r.commit[:10]}</code></td><td>{cell(r.note)}</td></tr>"
        for r in rows_for(key))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

