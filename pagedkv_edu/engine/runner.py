"""What the engine's loop asks of whatever computes a step (chapter 6).

:class:`~pagedkv_edu.engine.model_runner.ModelRunner` runs the model and returns logits to
sample from; the simulator's stand-in (:class:`~pagedkv_edu.simulate.StandInRunner`) runs
nothing and returns each row's next token itself. :class:`~pagedkv_edu.engine.engine.LLMEngine`
drives either, through one ``step``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, Union

import torch

from ..scheduler import ScheduledStep

RunnerOutput = Union[torch.Tensor, Sequence[int]]
"""Logits, one row per scheduled sequence, or (a stand-in) one token per scheduled sequence."""


class Runner(Protocol):
    def execute(self, step: ScheduledStep, input_ids: Sequence[int]) -> RunnerOutput:
        """Run the step; ``input_ids`` are its new tokens, sequence after sequence, in ``step.scheduled`` order."""

    def release(self, seq_id: Hashable) -> None:
        """The sequence left the running batch (finished, preempted or failed)."""


__all__ = ["Runner", "RunnerOutput"]
