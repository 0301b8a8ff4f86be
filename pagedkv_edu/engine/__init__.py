"""The serving engine: continuous batching, admission, preemption, sampling (ch. 6); sharing blocks (ch. 7).

* :mod:`.request`: ``Request``, the one record per sequence (tokens, ``num_computed_tokens``, block hashes, status);
* :mod:`.engine`: ``LLMEngine``, the loop: the scheduler decides a step, the model runner runs it, the engine samples;
* :mod:`.model_runner`: one scheduled step in, one forward pass over the mixed batch out;
* :mod:`.sampling`: ``SamplingParams`` and the seeded per-request samplers;
* :mod:`.trace`: an opt-in record of every step, for the replay.
"""

from .engine import POLICIES, PREEMPTION_MODES, CompletionOutput, EngineStats, LLMEngine, RequestOutput
from ..core.request import Request, Status
from .sampling import SamplingParams

__all__ = ["LLMEngine", "RequestOutput", "CompletionOutput", "EngineStats", "SamplingParams", "POLICIES",
           "PREEMPTION_MODES", "Request", "Status"]
