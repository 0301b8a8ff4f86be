"""What the engine's loop asks of whatever computes a step (chapter 6).

:class:`~pagedkv_edu.engine.model_runner.ModelRunner` runs the model and returns logits to
sample from; the simulator's stand-in (:class:`StandInRunner`) runs nothing and returns each
row's next token itself. :class:`~pagedkv_edu.engine.engine.LLMEngine` drives either through one
``step``: :func:`~pagedkv_edu.sim.simulate.simulate` is the engine with a :class:`StandInRunner`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, Union, runtime_checkable

from ..core.scheduler import ScheduledStep

RunnerOutput = Union[Any, list[int]]
"""Logits (a tensor, one row per scheduled sequence), or (a stand-in) one token per scheduled sequence."""


@runtime_checkable
class Runner(Protocol):
    def execute(self, step: ScheduledStep, input_ids: Sequence[int]) -> RunnerOutput:
        """Run the step; ``input_ids`` are its new tokens, sequence after sequence, in ``step.scheduled`` order."""

    def release(self, seq_id: Hashable) -> None:
        """The sequence left the running batch (finished, preempted or failed)."""


class StandInRunner:
    """A runner with no model: each row's next token is ``vocab_size + request_id``.

    Memory does not depend on what the tokens are; ids outside the vocabulary keep a generated
    token from ever being shared with another request through the prefix cache. ``measure(step)``
    runs where the forward pass would, while every scheduled sequence still holds its memory.
    """

    def __init__(self, vocab_size: int = 0, measure: Callable[[ScheduledStep], None] | None = None) -> None:
        self.vocab_size = vocab_size
        self.measure = measure

    def execute(self, step: ScheduledStep, input_ids: Sequence[int]) -> list[int]:
        if self.measure is not None:
            self.measure(step)
        return [self.vocab_size + s.seq.request_id for s in step.scheduled]

    def release(self, seq_id: Hashable) -> None:
        pass


__all__ = ["Runner", "RunnerOutput", "StandInRunner"]
