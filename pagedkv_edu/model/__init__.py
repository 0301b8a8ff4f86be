"""Chapter 5: a Llama decoder whose every K/V read and write goes through the paged cache.

* :mod:`.llama`: the forward pass (RMSNorm, RoPE with llama3 scaling, GQA, SwiGLU).
* :mod:`.kv_store`: the paged store (block tables) and the contiguous store (the oracle).
* :mod:`.loading`: the named models, from offline assets only.
"""

from .kv_store import ContiguousKVStore, PagedKVStore, StepMetadata
from .llama import Llama, LlamaConfig
from .loading import DEFAULT_MODEL, MODEL_NAMES, LoadedModel, load_model

__all__ = ["Llama", "LlamaConfig", "PagedKVStore", "ContiguousKVStore", "StepMetadata", "LoadedModel",
           "load_model", "MODEL_NAMES", "DEFAULT_MODEL"]
