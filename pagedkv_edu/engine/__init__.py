"""The serving engine: continuous batching, admission, preemption, sampling (ch. 6); sharing blocks (ch. 7)."""

from .engine import POLICIES, CompletionOutput, EngineStats, LLMEngine, RequestOutput
from .sampling import SamplingParams

__all__ = ["LLMEngine", "RequestOutput", "CompletionOutput", "EngineStats", "SamplingParams", "POLICIES"]
