"""The serving engine: continuous batching, admission, preemption, sampling (ch. 6); sharing blocks (ch. 7).

* :mod:`.engine`: ``LLMEngine``, the loop: the scheduler decides a step, the runner runs it, the engine samples;
* :mod:`.config`: ``EngineConfig``, every setting checked once, and the KV memory it describes;
* :mod:`.model_runner`: one scheduled step in, one forward pass over the mixed batch out;
* :mod:`.runner`: what the loop asks of a runner, and the simulator's stand-in;
* :mod:`.sampling`: the seeded per-request samplers;
* :mod:`.outputs`: ``RequestOutput``, ``EngineStats``, and a request's ``n`` samples (``SampleGroup``);
* :mod:`.generate`, :mod:`.beam`: chapter 5's static batch and chapter 7's beam search, on the engine.
"""

from ..core.request import Request, SamplingParams, Status
from .config import POLICIES, EngineConfig
from .engine import LLMEngine
from .outputs import CompletionOutput, EngineStats, RequestOutput

__all__ = ["LLMEngine", "EngineConfig", "RequestOutput", "CompletionOutput", "EngineStats", "SamplingParams",
           "POLICIES", "Request", "Status"]
