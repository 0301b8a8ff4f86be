"""What one engine step costs on a GPU, in a roofline model: bytes read and arithmetic done.

A decode step reads every weight once, whatever the batch, and every running sequence's K/V:
``weight_bytes + Σ context × kv_bytes_per_token``. Batching shares only the first term, so it
pays while the weights dominate and stops paying once the cache reads do. A prefill token adds
arithmetic (about ``2 × parameters`` FLOPs) rather than bytes. The step takes the longer of
bytes ÷ bandwidth and FLOPs ÷ peak arithmetic. Chapter 6 uses it to say when twenty sequences
cost little more than ten and when they do not, and to time the batching experiments in
:mod:`pagedkv_edu.sim.batching`. It is a model, not a measurement; the device numbers say where
each comes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..checks import check_whole
from ..specs import ModelSpec


@dataclass(frozen=True)
class Device:
    """A GPU as the roofline sees it: bytes per second and FLOPs per second."""

    name: str
    bandwidth: float   # bytes/s
    flops: float       # FLOP/s, dense bf16


H200 = Device("H200 (4.3 TB/s measured copy bandwidth; 989 TFLOP/s bf16 dense, the data sheet's)", 4.3e12, 989e12)
"""The book's GPU: the bandwidth measured on it (the guide's record), the arithmetic from the data sheet."""


def decode_step_bytes(spec: ModelSpec, contexts: Sequence[int]) -> int:
    """Bytes one decode step reads: the weights once, plus each sequence's K/V over its context."""
    for c in contexts:
        check_whole("context", c)
    return spec.weight_bytes + sum(contexts) * spec.kv_bytes_per_token


def step_flops(spec: ModelSpec, num_tokens: int, contexts: Sequence[int] = ()) -> int:
    """FLOPs of a step computing ``num_tokens`` tokens: the matmuls (2 per parameter per token), plus
    attention over ``contexts`` for decodes (q·K and p·V: 4 × context × query heads × head_dim per layer)."""
    check_whole("num_tokens", num_tokens)
    attention = 4 * sum(contexts) * spec.num_layers * spec.num_heads * spec.head_dim
    return 2 * spec.num_parameters * num_tokens + attention


def decode_step_seconds(spec: ModelSpec, batch: int, context: int, device: Device = H200) -> float:
    """A decode step of ``batch`` sequences of ``context`` tokens: the longer of its reads and its arithmetic."""
    check_whole("batch", batch, 1)
    contexts = [context] * batch
    return max(decode_step_bytes(spec, contexts) / device.bandwidth, step_flops(spec, batch, contexts) / device.flops)


def kv_share(spec: ModelSpec, batch: int, context: int) -> float:
    """Of the bytes a decode step reads, the share that is K/V (the part batching does not share)."""
    kv = batch * context * spec.kv_bytes_per_token
    return kv / (kv + spec.weight_bytes)


def kv_equals_weights(spec: ModelSpec, context: int) -> float:
    """The batch at which the K/V reads of sequences of ``context`` tokens equal the weights."""
    check_whole("context", context, 1)
    return spec.weight_bytes / (context * spec.kv_bytes_per_token)


def batch_where_batching_stops_paying(spec: ModelSpec, context: int, gain: float = 1.1,
                                      device: Device = H200) -> int:
    """The smallest batch from which doubling it cuts the time per token by less than ``gain`` (1.1: 10%).

    Searched on the roofline, so both limits count: cache reads that grow with the batch, and
    arithmetic that grows with it once the batch is large.
    """
    if not gain > 1:
        raise ValueError(f"gain must be above 1, got {gain!r}")
    batch = 1
    while batch < 1 << 20:
        per_token = decode_step_seconds(spec, batch, context, device) / batch
        if per_token / (decode_step_seconds(spec, 2 * batch, context, device) / (2 * batch)) < gain:
            return batch
        batch += max(1, batch // 16)
    raise ValueError(f"doubling the batch still pays at {batch} sequences: check the shape")


@dataclass(frozen=True)
class StepCost:
    """The time of one engine step: ``fixed + per_token × tokens computed + per_context × Σ context``.

    :meth:`for_gpu` fills it from the roofline of a model on a device (weights read once per
    step; a token's arithmetic; each decode's K/V read), in milliseconds. It adds the parts where
    the roofline takes the longer one, so it overstates a step by at most 2×. The default is a
    unit fixed cost with small per-token parts, for a model that is only about shape.
    """

    fixed: float = 1.0
    per_token: float = 0.01
    per_context: float = 0.0

    def __call__(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.fixed + self.per_token * num_tokens + self.per_context * context_tokens

    @classmethod
    def for_gpu(cls, spec: ModelSpec, device: Device = H200) -> "StepCost":
        """Milliseconds: weights ÷ bandwidth, 2 × parameters ÷ FLOP/s per token, KV bytes ÷ bandwidth per context token."""
        return cls(1e3 * spec.weight_bytes / device.bandwidth, 1e3 * 2 * spec.num_parameters / device.flops,
                   1e3 * spec.kv_bytes_per_token / device.bandwidth)


__all__ = ["Device", "H200", "StepCost", "decode_step_bytes", "step_flops", "decode_step_seconds", "kv_share",
           "kv_equals_weights", "batch_where_batching_stops_paying"]
