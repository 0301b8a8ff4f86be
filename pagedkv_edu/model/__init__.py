"""Chapter 5: a Llama decoder (:mod:`.llama`) whose every K/V read and write goes through the paged cache;
the named models from offline assets (:mod:`.loading`)."""

from ..attention.kv_cache import PagedKVCache, StepMetadata
from .llama import Llama, LlamaConfig
from .loading import DEFAULT_MODEL, MODEL_NAMES, LoadedModel, load_model

__all__ = ["Llama", "LlamaConfig", "PagedKVCache", "StepMetadata", "LoadedModel", "load_model", "MODEL_NAMES",
           "DEFAULT_MODEL"]
