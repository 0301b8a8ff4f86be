"""The paged-KV-cache article's workload: 50 travel consultants querying hotel availability at peak season.

Every chapter draws the same seeded requests (a shared 200-token system prompt, 400-800 tokens
of context, a 25-token query; 100-500 output tokens), as lengths, stand-in ids, or real text
tokenized to exactly those lengths (:func:`consultant_prompts`, from templates, no download).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SYSTEM_PROMPT_TOKENS = 200
RETRIEVED_TOKENS = (400, 800)
QUERY_TOKENS = 25
OUTPUT_TOKENS = (100, 500)
MAX_SEQ_LEN = 2048
NUM_CONSULTANTS = 50


@dataclass(frozen=True)
class Request:
    """One request as the memory manager sees it: lengths, not text."""

    request_id: int
    prompt_len: int
    output_len: int
    arrival_step: int = 0
    shared_prefix_len: int = SYSTEM_PROMPT_TOKENS
    arrival_ms: float = 0.0   # for the timed simulator (chapter 6): a clock, not a step, so budgets cannot move it

    def __post_init__(self) -> None:
        if self.prompt_len < 0 or self.output_len < 0:
            raise ValueError(
                f"request {self.request_id}: prompt_len={self.prompt_len} and "
                f"output_len={self.output_len} must be >= 0"
            )
        if self.arrival_step < 0:
            raise ValueError(f"request {self.request_id}: arrival_step={self.arrival_step} must be >= 0")
        if not self.arrival_ms >= 0:
            raise ValueError(f"request {self.request_id}: arrival_ms={self.arrival_ms} must be >= 0")

    @property
    def final_len(self) -> int:
        """Tokens in the cache when the request finishes (prompt + output)."""
        return self.prompt_len + self.output_len


def copilot50(
    seed: int = 0,
    num_requests: int = NUM_CONSULTANTS,
    *,
    output_scale: float = 1.0,
    length_scale: float = 1.0,
    arrival_rate: float | None = None,
) -> list[Request]:
    """The paged-KV-cache article's workload, seeded.

    ``output_scale`` shrinks outputs (e.g. 0.2 for "outputs / 5") so a CPU can run a real
    model through it. ``length_scale`` shrinks every length, prompts and shared prefix too
    (a run at 1/16 scale pairs with ``max_seq_len / 16`` and ``block_size / 16``): the same
    draw of requests with the same proportions, cheap enough for a notebook. ``arrival_rate`` spreads arrivals as a Poisson process (requests per
    decode step); ``None`` means everyone asks at once, the article's peak-season picture.
    """
    if num_requests <= 0:
        raise ValueError(f"num_requests must be positive, got {num_requests}")
    if not 0 < output_scale <= 1:
        raise ValueError(f"output_scale must be in (0, 1], got {output_scale}")
    if not 0 < length_scale <= 1:
        raise ValueError(f"length_scale must be in (0, 1], got {length_scale}")
    if arrival_rate is not None and arrival_rate <= 0:
        raise ValueError(f"arrival_rate must be positive or None, got {arrival_rate}")
    rng = np.random.default_rng(seed)
    retrieved = rng.integers(RETRIEVED_TOKENS[0], RETRIEVED_TOKENS[1] + 1, size=num_requests)
    outputs = rng.integers(OUTPUT_TOKENS[0], OUTPUT_TOKENS[1] + 1, size=num_requests)
    if arrival_rate is None:
        arrivals = np.zeros(num_requests, dtype=np.int64)
    else:
        arrivals = np.floor(np.cumsum(rng.exponential(1.0 / arrival_rate, size=num_requests))).astype(np.int64)
    return [
        Request(
            request_id=i,
            prompt_len=max(1, round((SYSTEM_PROMPT_TOKENS + int(retrieved[i]) + QUERY_TOKENS) * length_scale)),
            output_len=max(1, round(int(outputs[i]) * output_scale * length_scale)),
            arrival_step=int(arrivals[i]),
            shared_prefix_len=round(SYSTEM_PROMPT_TOKENS * length_scale),
        )
        for i in range(num_requests)
    ]


def prompt_token_ids(request: Request, vocab_size: int, seed: int = 0, *, low: int = 100) -> list[int]:
    """Deterministic token ids for a request whose first ``shared_prefix_len`` ids are shared.

    Requests in this workload share the system prompt; giving them identical leading ids is
    what lets prefix caching (chapter 8) find the shared blocks. Ids start at ``low`` to stay
    clear of a tokenizer's special tokens.
    """
    if vocab_size <= low:
        raise ValueError(f"vocab_size={vocab_size} must exceed low={low}")
    shared = np.random.default_rng([seed, 0]).integers(low, vocab_size, size=request.shared_prefix_len)
    own = np.random.default_rng([seed, 1, request.request_id]).integers(
        low, vocab_size, size=max(0, request.prompt_len - request.shared_prefix_len)
    )
    return [int(t) for t in np.concatenate([shared, own])[: request.prompt_len]]


# --- real text -----------------------------------------------------------------------------
SYSTEM_PROMPT = (
    "You are OptiVerse Copilot, the booking assistant of a travel agency. Consultants ask you which "
    "hotels still have rooms for their customers during the peak season. Answer only from the hotel "
    "listings given below the question's context; if no hotel matches, say so. For every hotel that "
    "matches, give its name, district, nightly price in New Taiwan dollars, rooms left, and one line on "
    "why it suits the customer. Keep the answer short and factual, list the cheapest hotel first, never "
    "invent a hotel, a price or a room, and remind the consultant that availability changes quickly "
    "at this time of year, so a booking should be confirmed with the hotel before the customer pays. "
    "Use the customer's dates exactly as the consultant gives them, and mention breakfast, parking and "
    "airport transfer only when the listing does. If the consultant asks for something the listings do not "
    "cover, such as flights, tours or visas, say that you only know the hotels below and suggest the "
    "agency's travel desk instead. "
)
_NAMES = ("Harbour", "Lantern", "Jade", "Maple", "Riverside", "Summit", "Orchid", "Cedar", "Pearl",
          "Camphor", "Sunrise", "Old Street", "Tea Garden", "Hot Spring", "Lighthouse", "Bamboo")
_KINDS = ("Hotel", "Inn", "Suites", "Resort", "Guesthouse", "Boutique Hotel")
_CITIES = {"Taipei": ("Da'an", "Xinyi", "Zhongshan", "Wanhua", "Beitou"),
           "Tainan": ("West Central", "Anping", "East"),
           "Hualien": ("Hualien City", "Xincheng", "Shoufeng"),
           "Taichung": ("West", "Nantun", "Xitun"),
           "Kaohsiung": ("Cianjin", "Lingya", "Gushan")}
_AMENITIES = ("breakfast included", "free parking", "airport transfer", "family rooms", "hot spring bath",
              "rooftop pool", "bicycle rental", "late check-out", "sea view", "near the MRT station",
              "pets allowed", "24-hour front desk")
_QUESTIONS = (
    "Which hotels in {city} still have a double room for two adults from {date}, under {price} dollars a night?",
    "My customer needs {rooms} rooms in {city} from {date}, close to public transport. What is still free?",
    "Is there a family room in {city} from {date} with breakfast, at most {price} dollars a night?",
    "A couple arriving in {city} on {date} wants a quiet hotel with parking. Which ones have rooms left?",
)
_DATES = ("Friday the 6th", "the Lunar New Year weekend", "Saturday the 14th", "the 2nd to the 5th",
          "Thursday the 19th", "the long weekend")


def _listing(rng: np.random.Generator, number: int) -> str:
    city = list(_CITIES)[int(rng.integers(len(_CITIES)))]
    district = _CITIES[city][int(rng.integers(len(_CITIES[city])))]
    name = f"{_NAMES[int(rng.integers(len(_NAMES)))]} {_KINDS[int(rng.integers(len(_KINDS)))]}"
    amenities = ", ".join(str(a) for a in rng.choice(_AMENITIES, size=3, replace=False))
    return (f"[{number}] {name}, {district} District, {city}. {int(rng.integers(1, 13))} rooms left; "
            f"{int(rng.integers(18, 90)) * 100} dollars a night; rated {rng.integers(30, 50) / 10:.1f}; "
            f"{amenities}.\n")


def _question(rng: np.random.Generator) -> str:
    template = _QUESTIONS[int(rng.integers(len(_QUESTIONS)))]
    return "\nQuestion: " + template.format(city=list(_CITIES)[int(rng.integers(len(_CITIES)))],
                                            date=_DATES[int(rng.integers(len(_DATES)))],
                                            rooms=int(rng.integers(2, 5)), price=int(rng.integers(25, 60)) * 100)


def _exactly(encode: Callable[[str], list[int]], write: Callable[[int], str], n: int) -> list[int]:
    """``n`` token ids of text from ``write(i)`` pieces, appended until long enough, then cut."""
    ids: list[int] = []
    i = 0
    while len(ids) < n:
        ids += encode(write(i))
        i += 1
    return ids[:n]


def consultant_prompts(requests: Sequence[Request], tokenizer: object, seed: int = 0, *,
                       length_scale: float = 1.0) -> list[list[int]]:
    """The requests' prompts as real text, tokenized to exactly each request's lengths.

    Every prompt is ``shared_prefix_len`` ids of the system prompt (followed, for the few-shot
    variant's longer shared part, by worked examples: a listing and an answer), then hotel
    listings as the retrieved context, then a consultant's question of ``QUERY_TOKENS ×
    length_scale`` tokens. Each part is tokenized on its own and cut to its length, so lengths,
    and hence every memory figure, are those of :func:`copilot50`; the text is seeded by the
    request's id. ``tokenizer`` is a Hugging Face tokenizer (anything with ``encode``).
    """
    if not hasattr(tokenizer, "encode"):
        raise TypeError(f"tokenizer must have an encode() method, got {type(tokenizer).__name__}")
    if not 0 < length_scale <= 1:
        raise ValueError(f"length_scale must be in (0, 1], got {length_scale}")

    def encode(text: str) -> list[int]:
        return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]   # type: ignore[attr-defined]

    shared_rng = np.random.default_rng([seed, 2])
    longest = max((r.shared_prefix_len for r in requests), default=0)
    shared = _exactly(encode, lambda i: SYSTEM_PROMPT if i == 0 else
                      "Example listing: " + _listing(shared_rng, i) + "Example answer: it has rooms; confirm first.\n",
                      longest)
    query_len = max(1, round(QUERY_TOKENS * length_scale))
    prompts = []
    for r in requests:
        if r.prompt_len <= r.shared_prefix_len:   # all of it is system prompt (as prompt_token_ids does)
            prompts.append(shared[: r.prompt_len])
            continue
        own = r.prompt_len - r.shared_prefix_len
        rng = np.random.default_rng([seed, 3, r.request_id])
        question = _exactly(encode, lambda i: _question(rng), min(query_len, own))
        context = _exactly(encode, lambda i: ("\nHotel listings:\n" if i == 0 else "") + _listing(rng, i),
                           own - len(question))
        prompts.append(shared[: r.shared_prefix_len] + context + question)
    return prompts
