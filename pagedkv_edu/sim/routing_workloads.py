"""Requests that arrive over time, for routing across replicas (chapter 11).

Three seeded ways of sharing a prefix, with Poisson arrivals: one system prompt for all
(:func:`consultants`), one per tenant drawn from a Zipf law (:func:`tenants`), and multi-turn
chats whose next prompt holds the previous answer (:func:`chats`). Token ids stand in for text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..checks import check_whole
from ..workload import copilot50, prompt_token_ids

VOCAB_SIZE = 32_000
MAX_REQUESTS = 100_000
MAX_RATE_PER_S = 1e6


@dataclass(frozen=True)
class TimedRequest:
    """One request as the router sees it: when it arrives, its prompt, and the answer it will get."""

    request_id: int
    arrival_ms: float
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    group: str          # what it shares a prefix with: "system prompt", "tenant 3", "chat 7"

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)


def _check(num_requests: int, rate_per_s: float) -> None:
    check_whole("num_requests", num_requests, 1, MAX_REQUESTS)
    if not 0 < rate_per_s <= MAX_RATE_PER_S:
        raise ValueError(f"rate_per_s must be in (0, {MAX_RATE_PER_S:g}], got {rate_per_s!r}")


def poisson_arrivals_ms(rng: np.random.Generator, n: int, rate_per_s: float) -> np.ndarray:
    """``n`` arrival times in milliseconds of a Poisson process of ``rate_per_s`` arrivals per second."""
    return np.cumsum(rng.exponential(1000.0 / rate_per_s, size=n))


def _ids(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in rng.integers(100, VOCAB_SIZE, size=n))


def consultants(num_requests: int = 200, rate_per_s: float = 50.0, seed: int = 0) -> list[TimedRequest]:
    """The article's consultants: one 200-token system prompt shared by every request."""
    _check(num_requests, rate_per_s)
    rng = np.random.default_rng([seed, 11, 0])
    arrivals = poisson_arrivals_ms(rng, num_requests, rate_per_s)
    return [TimedRequest(r.request_id, float(arrivals[i]), tuple(prompt_token_ids(r, VOCAB_SIZE, seed)),
                         _ids(rng, r.output_len), "system prompt")
            for i, r in enumerate(copilot50(seed, num_requests))]


def tenants(num_requests: int = 200, rate_per_s: float = 50.0, seed: int = 0, *, num_tenants: int = 48,
            zipf_s: float = 1.0) -> list[TimedRequest]:
    """Many tenants, each with its own 400-800-token system prompt; tenant ``k`` sends in proportion to ``1 / (k+1)^s``.

    After the system prompt comes 50-150 tokens of the user's own; answers are 50-200 tokens.
    """
    _check(num_requests, rate_per_s)
    check_whole("num_tenants", num_tenants, 1, 10_000)
    if not 0 <= zipf_s <= 10:
        raise ValueError(f"zipf_s must be in [0, 10], got {zipf_s!r}")
    rng = np.random.default_rng([seed, 11, 1])
    systems = [_ids(rng, int(rng.integers(400, 801))) for _ in range(num_tenants)]
    weights = 1.0 / np.arange(1, num_tenants + 1) ** zipf_s
    who = rng.choice(num_tenants, size=num_requests, p=weights / weights.sum())
    arrivals = poisson_arrivals_ms(rng, num_requests, rate_per_s)
    return [TimedRequest(i, float(arrivals[i]), systems[t] + _ids(rng, int(rng.integers(50, 151))),
                         _ids(rng, int(rng.integers(50, 201))), f"tenant {t}")
            for i, t in enumerate(who)]


def chats(num_requests: int = 200, rate_per_s: float = 50.0, seed: int = 0, *, turns: tuple[int, int] = (3, 6),
          think_ms: float = 2000.0) -> list[TimedRequest]:
    """Conversations of 3-6 turns; each turn's prompt is the whole conversation so far plus a new message.

    Every conversation starts with the same 200-token system prompt and a 50-150-token first
    message; answers are 100-300 tokens, later messages 30-100. Conversations start as a Poisson
    process, so that turns arrive at about ``rate_per_s``; a turn follows the one before after
    ``think_ms`` plus an exponential pause of the same mean.
    """
    _check(num_requests, rate_per_s)
    lo, hi = turns
    check_whole("turns[0]", lo, 1, 100)
    check_whole("turns[1]", hi, lo, 100)
    if not 0 <= think_ms <= 1e7:
        raise ValueError(f"think_ms must be in [0, 1e7], got {think_ms!r}")
    rng = np.random.default_rng([seed, 11, 2])
    system = _ids(rng, 200)
    starts = poisson_arrivals_ms(rng, num_requests, rate_per_s / ((lo + hi) / 2))
    made: list[tuple[float, tuple[int, ...], tuple[int, ...], str]] = []
    for c, start in enumerate(starts):
        context, t = system + _ids(rng, int(rng.integers(50, 151))), float(start)
        for k in range(int(rng.integers(lo, hi + 1))):
            answer = _ids(rng, int(rng.integers(100, 301)))
            made.append((t, context, answer, f"chat {c}"))
            context = context + answer + _ids(rng, int(rng.integers(30, 101)))
            t += think_ms + float(rng.exponential(think_ms))
        if len(made) >= 2 * num_requests:
            break
    made.sort(key=lambda m: m[0])
    return [TimedRequest(i, t, prompt, answer, group) for i, (t, prompt, answer, group) in enumerate(made[:num_requests])]


WORDS: tuple[str, ...] = tuple("""
time year people way day man thing woman life child world school state family student group country problem
hand part place case week company system program question work government number night point home water room
mother area money story fact month lot right study book eye job word business issue side kind head house
service friend father power hour game line end member law car city community name team minute idea kid body
information back parent face others level office door health person art war history party result change reason
research girl moment air teacher force education foot boy age policy music market sense nation plan college
interest death experience effect class control care field development role rate heart drug show leader light
voice wife mind price report decision son view relationship town road arm difference value building action
model season tax director position player record paper space ground form event official matter center site
project activity star table need court oil cost industry figure street image phase stock fire bank bird river
stone cloud window bridge forest letter picture engine memory block cache token layer query key vector batch
queue router server client request answer prompt kernel thread page""".split())
"""200 English words, each one token of the Llama-3.2 tokenizer with or without a leading space (tested)."""


def as_text(prompt: tuple[int, ...], stride: int = 1) -> str:
    """A prompt of token ids as words, for a server that takes text: every ``stride``-th token, one word each.

    The same ids give the same words, so two prompts that share a prefix of ids share a prefix
    of text (what a router's tree matches on), and with the Llama-3.2 tokenizer each word is one
    token again: a prompt keeps its sharing, at ``1/stride`` of its length.
    """
    check_whole("stride", stride, 1, 1 << 20)
    return " ".join(WORDS[t % len(WORDS)] for t in prompt[::stride])


WORKLOADS: dict[str, Callable[..., list[TimedRequest]]] = {
    "consultants": consultants, "tenants": tenants, "chats": chats,
}
"""The three workloads by name: ``WORKLOADS[name](num_requests, rate_per_s, seed)``."""
