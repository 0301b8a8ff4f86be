"""What one engine step costs on a GPU: the book's one cost model (chapters 6, 9 and 11).

A step reads every weight once, whatever the batch, and the K/V of every sequence it runs:
``weight_bytes + Σ (cached + new tokens) × kv_bytes_per_token`` (a decode reads its context; a
prefill chunk re-reads the chunks before it and writes its own). It does arithmetic for every
token it computes: ``2 × parameters`` FLOPs for the matmuls, plus attention, ``4 × layers ×
query heads × head_dim`` FLOPs for each (query, key) pair (a chunk of ``q`` new tokens after
``c`` cached ones has ``q·c + q(q+1)/2`` pairs, causally). The step takes the longer of its bytes
over the bandwidth and its FLOPs over the peak times the MFU, the share of the peak a real
step's matmuls reach. Batching shares only the weight reads, so it pays while they dominate.

Every number lives in one :class:`Device` and one :class:`~pagedkv_edu.specs.ModelSpec`;
:func:`cost_table` prints them, so each chapter that times something says what it assumed.
It is a model, not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..checks import check_whole
from ..specs import ModelSpec, get_spec


@dataclass(frozen=True)
class Device:
    """A GPU as the cost model sees it. Every field is an assumption with a named source.

    ``bandwidth``: HBM bytes/s. ``flops``: peak dense bf16/fp16 FLOP/s. ``mfu``: the share of
    that peak a step's matmuls reach (40–60% is typical of a well-tuned prefill). ``host_bandwidth``
    and ``copy_latency_s``: a pinned host<->device copy's bytes/s and fixed cost (launch and DMA
    setup), what a swap pays.
    """

    name: str
    bandwidth: float
    flops: float
    mfu: float
    host_bandwidth: float
    copy_latency_s: float
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("bandwidth", "flops", "host_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not 0 < self.mfu <= 1:
            raise ValueError(f"mfu must be in (0, 1], got {self.mfu!r}")
        if self.copy_latency_s < 0:
            raise ValueError(f"copy_latency_s must be >= 0, got {self.copy_latency_s!r}")

    @property
    def achieved_flops(self) -> float:
        """FLOP/s a step's arithmetic runs at: the peak times the MFU."""
        return self.flops * self.mfu


H200 = Device("H200", 4.3e12, 989e12, 0.5, 50e9, 5e-6,
              "bandwidth: measured copy bandwidth (the guide's record); FLOP/s: the data sheet's bf16 dense; "
              "MFU 0.5 and PCIe 5.0 at 50 GB/s: assumed")
"""The book's GPU (chapters 6 and 11)."""

A100_PCIE = Device("A100-40GB on PCIe 4.0", 1.555e12, 312e12, 0.48, 25e9, 5e-6,
                   "the paper's GPU; bandwidth and FLOP/s: the data sheet's; MFU 0.48 (a 150 TFLOP/s prefill), "
                   "25 GB/s of the link's 32 and 5 µs a copy: assumed")
"""The paper's GPU, for its Fig. 19 (chapter 9)."""

Work = Sequence[tuple[int, int]]
"""One step's sequences, each as ``(new tokens, cached tokens before the step)``."""


@dataclass(frozen=True)
class StepCost:
    """Milliseconds of one engine step of ``spec`` on ``device``: the longer of its bytes and its FLOPs."""

    spec: ModelSpec
    device: Device = H200

    def bytes_moved(self, work: Work) -> int:
        """The weights once, plus every sequence's K/V: its cached tokens read and its new tokens written."""
        return self.spec.weight_bytes + sum(c + q for q, c in _checked(work)) * self.spec.kv_bytes_per_token

    def flops(self, work: Work) -> int:
        """Matmuls (2 per parameter per new token) plus attention over every causal (query, key) pair."""
        pairs = sum(q * c + q * (q + 1) // 2 for q, c in _checked(work))
        spec = self.spec
        return 2 * spec.num_parameters * sum(q for q, _ in work) + 4 * spec.num_layers * spec.num_heads * spec.head_dim * pairs

    def __call__(self, work: Work) -> float:
        if not work:
            return 0.0
        return 1e3 * max(self.bytes_moved(work) / self.device.bandwidth, self.flops(work) / self.device.achieved_flops)

    @property
    def ridge_tokens(self) -> float:
        """Tokens whose matmuls take as long as one read of the weights: a step computing fewer costs
        what a decode step costs, so decodes ride free beside a prefill chunk this small."""
        return self.spec.weight_bytes / self.device.bandwidth * self.device.achieved_flops / (2 * self.spec.num_parameters)

    def decode_ms(self, batch: int, context: int) -> float:
        """A decode step of ``batch`` sequences, each attending over ``context`` tokens (its new one included)."""
        check_whole("batch", batch, 1)
        check_whole("context", context, 1)
        return self([(1, context - 1)] * batch)

    def prefill_ms(self, num_tokens: int, cached: int = 0) -> float:
        """One step prefilling ``num_tokens`` of one prompt after ``cached`` tokens already in the cache."""
        check_whole("num_tokens", num_tokens, 1)
        return self([(num_tokens, cached)])


def _checked(work: Work) -> Work:
    for q, c in work:
        check_whole("new tokens", q, 1)
        check_whole("cached tokens", c)
    return work


def cost_table(spec: ModelSpec | None = None, *devices: Device) -> str:
    """Every number behind a modelled millisecond, one column per device: what a chapter assumed.

    Default: Llama-3.2-1B on an H200, the model and device of chapters 6 and 11.
    """
    spec = spec or get_spec("llama-3.2-1b")
    devices = devices or (H200,)
    rows: list[tuple[str, list[str]]] = [
        ("model", [spec.name] * len(devices)),
        ("parameters", [f"{spec.num_parameters / 1e9:.2f} B"] * len(devices)),
        ("weights", [f"{spec.weight_bytes / 1e9:.2f} GB ({spec.dtype})"] * len(devices)),
        ("K/V per token", [f"{spec.kv_bytes_per_token / 1024:.1f} KiB"] * len(devices)),
        ("attention FLOPs per (q, k) pair", [f"{4 * spec.num_layers * spec.num_heads * spec.head_dim:,}"] * len(devices)),
        ("device", [d.name for d in devices]),
        ("HBM bandwidth", [f"{d.bandwidth / 1e12:.2f} TB/s" for d in devices]),
        ("peak FLOP/s", [f"{d.flops / 1e12:.0f} T" for d in devices]),
        ("MFU (share of the peak reached)", [f"{d.mfu:.2f}" for d in devices]),
        ("host link", [f"{d.host_bandwidth / 1e9:.0f} GB/s, {d.copy_latency_s * 1e6:.0f} µs a copy" for d in devices]),
        ("decode step: 16 sequences at 1,024", [f"{StepCost(spec, d).decode_ms(16, 1024):.3f} ms" for d in devices]),
        ("prefill: 1,024 tokens", [f"{StepCost(spec, d).prefill_ms(1024):.2f} ms" for d in devices]),
    ]
    width = max(len(label) for label, _ in rows)
    col = max(len(v) for _, values in rows for v in values)
    return "\n".join(f"{label:<{width}}  " + "  ".join(f"{v:>{col}}" for v in values) for label, values in rows)


def decode_step_seconds(spec: ModelSpec, batch: int, context: int, device: Device = H200) -> float:
    """:meth:`StepCost.decode_ms`, in seconds."""
    return StepCost(spec, device).decode_ms(batch, context) / 1e3


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
    cost = StepCost(spec, device)
    batch = 1
    while batch < 1 << 20:
        if cost.decode_ms(batch, context) / batch / (cost.decode_ms(2 * batch, context) / (2 * batch)) < gain:
            return batch
        batch += max(1, batch // 16)
    raise ValueError(f"doubling the batch still pays at {batch} sequences: check the shape")


__all__ = ["Device", "H200", "A100_PCIE", "StepCost", "Work", "cost_table", "decode_step_seconds", "kv_share",
           "kv_equals_weights", "batch_where_batching_stops_paying"]
