"""Workloads shaped like the PagedAttention paper's ShareGPT and Alpaca requests (chapter 1).

The paper gives only mean lengths (Fig. 11: ShareGPT 161.31 / 337.99 tokens, Alpaca 19.31 /
58.45); given only a mean, the maximum-entropy law on the positive integers is geometric, so we
draw from that. Requests longer than ``max_seq_len`` are redrawn, as the paper's traces hold none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .workload import Request

PAPER_MAX_SEQ_LEN = 2048          # OPT's context
PAPER_KV_SLOTS_OPT13B = 15_700    # Table 1: OPT-13B on one A100-40GB, 12 GB of KV space = 15.7K token slots
FIGURE_2_KV_UTILISATION = {"max": 0.204, "pow2": 0.268, "oracle": 0.382, "paged": 0.963}
"""Kwon et al., Figure 2: the share of KV memory holding tokens under Orca (Max, Pow2, Oracle) and vLLM."""


@dataclass(frozen=True)
class DatasetShape:
    """A dataset as the paper summarises it: mean input and output lengths in tokens."""

    name: str
    mean_input: float
    mean_output: float


SHAREGPT = DatasetShape("ShareGPT", 161.31, 337.99)
ALPACA = DatasetShape("Alpaca", 19.31, 58.45)
PAPER_DATASETS = {d.name: d for d in (SHAREGPT, ALPACA)}


def paper_shaped(
    dataset: DatasetShape | str,
    num_requests: int = 200,
    seed: int = 0,
    *,
    max_seq_len: int = PAPER_MAX_SEQ_LEN,
) -> list[Request]:
    """``num_requests`` requests whose input and output lengths are geometric with the dataset's means.

    Every request asks at step 0: the server is saturated, as under the paper's highest request
    rates, so utilisation measures the allocator and not an idle server.
    """
    shape = PAPER_DATASETS.get(dataset) if isinstance(dataset, str) else dataset
    if shape is None:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(PAPER_DATASETS)}")
    if num_requests <= 0:
        raise ValueError(f"num_requests must be positive, got {num_requests}")
    rng = np.random.default_rng([seed, int(shape.mean_input * 100)])
    requests: list[Request] = []
    while len(requests) < num_requests:
        prompt = int(rng.geometric(1.0 / shape.mean_input))     # support 1, 2, ...; mean = 1/p
        output = int(rng.geometric(1.0 / shape.mean_output))
        if prompt + output <= max_seq_len:
            requests.append(Request(len(requests), prompt, output, shared_prefix_len=0))
    return requests
