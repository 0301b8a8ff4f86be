"""One turn of the serving loop, over the engine's parts: the step a reader rewrites in the last chapter.

nano-vllm's ``LLMEngine.step`` is seven lines over its parts; this one is the same turn with the book's
rules spelled out: the scheduler decides and the runner runs the model (``forward_step``), a request's
``n`` samples fork off after its prompt, every sequence whose step reached its last token samples, each
token joins its record, and what stopped finishes (its blocks go back; its output is returned once its
last sample ends). The block manager registers the blocks a step fills when it grants them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Absolute imports: this file is also the last chapter's reference, saved as a reader's my_engine/step.py.
from pagedkv_edu.engine.outputs import RequestOutput
from pagedkv_edu.engine.sampling import sample_tokens, stop_reason

if TYPE_CHECKING:   # the engine calls this with itself
    from pagedkv_edu.engine.engine import LLMEngine

FAILED = "error: needs more KV memory than the whole budget"
"""The finish reason of a request that can never be held, even with all the memory free."""


def step(engine: "LLMEngine") -> list[RequestOutput]:
    """One iteration: schedule, run the model once on the mixed batch, sample; return the requests that finished."""
    finished = engine.take_ready()                       # asked for no tokens: done without memory
    scheduled, out = engine.forward_step()               # the scheduler decides, the runner runs the model once
    for request in scheduled.failed:
        finished += engine.finish_sequence(request, FAILED, release=False)
    rows = []                                            # (row of the output, who samples from it)
    for row, s in enumerate(scheduled.scheduled):
        if s.samples:                                    # a chunk of a prompt has no token yet
            rows += [(row, seq) for seq in engine.samplers(s.seq)]
    tokens, logprobs = sample_tokens(out, rows, engine.config.keep_logprobs) if rows else ([], None)
    for (row, request), token in zip(rows, tokens):
        engine.append_token(request, token, None if logprobs is None else logprobs[row])
        reason = stop_reason(request, engine.config.stop_token_ids, engine.tokenizer)
        if reason is not None:
            finished += engine.finish_sequence(request, reason)
    engine.record(scheduled)
    return finished


__all__ = ["FAILED", "step"]
