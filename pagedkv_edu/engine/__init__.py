"""Chapter 6's serving engine: continuous batching, admission, preemption, sampling."""

from .engine import POLICIES, EngineStats, LLMEngine, RequestOutput
from .sampling import SamplingParams

__all__ = ["LLMEngine", "RequestOutput", "EngineStats", "SamplingParams", "POLICIES"]
