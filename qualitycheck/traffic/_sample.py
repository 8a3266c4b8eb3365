"""Which logged requests become cases: repeated prompts dropped, then a stratified sample in bounded memory.

Strata are category × output length × temperature × prompt length × with or
without a system prompt, so a sample of a few thousand cases keeps the long
answers, the sampled requests and the system-prompted routes that a uniform
sample of a skewed log would miss. `--sample N` allocates N over the strata
in proportion to their sizes, with a minimum for every non-empty stratum.

Every case gets a sampling key, a hash of the seed and its id, so the
sample does not depend on the order the lines are processed in and is the
same for the same `--seed`. Within a stratum the cases with the smallest
keys are a uniform sample of it (a bottom-k sample). Memory does not grow
with the log: what is kept is the 4·N smallest keys overall, which hold the
smallest keys of every stratum in about four times the number proportional
allocation gives it, plus the few smallest of each stratum for the minimum
and the rounding. Repeated prompts are recognised by 8-byte hashes in a
sorted array.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from qualitycheck.traffic._rules import Drafted, content_text

__all__ = ["DigestSet", "StratifiedSample", "Stratum", "allocate", "prompt_digest", "sample_key", "stratum_key", "stratum_of"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

OUTPUT_BUCKETS = ((64, "short"), (256, "medium"), (1024, "long"))
"""Upper bounds in tokens of the logged answer; longer is `very_long`, no logged answer `unknown`."""
PROMPT_BUCKETS = ((500, "short"), (2000, "medium"), (8000, "long"))
"""Upper bounds in characters of the messages' text; longer is `very_long`."""
LOW_TEMPERATURE = 0.7
"""At or below: `low`; above: `high`; exactly 0: `greedy`."""


@dataclass(frozen=True, order=True)
class Stratum:
    category: str
    output: str
    temperature: str
    prompt: str
    system: bool

    def key(self) -> str:
        return f"{self.category}/out={self.output}/temp={self.temperature}/prompt={self.prompt}/system={'yes' if self.system else 'no'}"

    def astuple(self) -> tuple[str, str, str, str, bool]:
        """The stratum as a plain tuple: what crosses from the workers (and keys the sample) without a class."""
        return (self.category, self.output, self.temperature, self.prompt, self.system)


def _bucket(value: int, bounds: tuple[tuple[int, str], ...]) -> str:
    for bound, name in bounds:
        if value <= bound:
            return name
    return "very_long"


def stratum_key(d: Drafted) -> tuple[str, str, str, str, bool]:
    """The stratum of a drafted case as a plain tuple (what replay's workers hand back, per line)."""
    tokens = d.output_tokens
    return (
        d.category,
        "unknown" if tokens is None else _bucket(tokens, OUTPUT_BUCKETS),
        "greedy" if d.temperature == 0 else "low" if d.temperature <= LOW_TEMPERATURE else "high",
        _bucket(d.prompt_chars, PROMPT_BUCKETS),
        d.has_system,
    )


def stratum_of(d: Drafted) -> Stratum:
    return Stratum(*stratum_key(d))


_SPACE = b" \t\n\r\x0b\x0c"
_ASCII_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


_ASCII = bytes(range(128))


def _normalised(text: str) -> bytes:
    """Lower-cased, without whitespace: byte operations that run at memory speed, where splitting a
    prompt into words and joining them again costs more than the rest of a line's drafting. ASCII text
    (most prompts) is lower-cased and stripped in one pass over its bytes; `str.lower` gives the same bytes.

    Text with a few characters beyond ASCII (typographic quotes and dashes,
    accented names) takes the same path when `str.lower` leaves each of
    those characters as it is: UTF-8 spells them in bytes of 128 and above,
    which the ASCII translation leaves alone, so only the ASCII letters
    change, as they would. `str.lower` over the whole text costs several
    times more per character, and is what any other text gets (a character
    it changes, such as `É`, `İ`, the Kelvin sign, or a sigma, whose
    lower case depends on what follows it).
    """
    if text.isascii():
        return text.encode().translate(_ASCII_LOWER, _SPACE)
    raw = text.encode("utf-8", "surrogatepass")
    beyond = raw.translate(None, _ASCII).decode("utf-8", "surrogatepass")
    if beyond.lower() == beyond:
        return raw.translate(_ASCII_LOWER, _SPACE)
    return text.lower().encode("utf-8", "surrogatepass").translate(None, _SPACE)


_CATEGORY_STARTS: dict[str, Any] = {}
"""The hash state after a category's name: copying it is cheaper than starting a hash per case."""
_ROLE_MARKS: dict[str, bytes] = {}
"""`\x1frole\x1f` as bytes per role: what separates the messages in a digest."""


def prompt_digest(case: Mapping[str, Any]) -> int:
    """8-byte hash of what the case asks, after lower-casing and dropping whitespace (its category included).

    Tools and the response format are part of the question: the same words
    with another schema are another case.
    """
    category = str(case["category"])
    started = _CATEGORY_STARTS.get(category)
    if started is None:
        started = hashlib.blake2b(category.encode(), digest_size=8)
        if len(_CATEGORY_STARTS) < 4096:
            _CATEGORY_STARTS[category] = started
    h = started.copy()
    messages = case.get("messages")
    if messages is None:
        h.update(b"\x1fprompt\x1f" + _normalised(str(case.get("prompt", ""))))
    else:
        for m in messages:
            role = m.get("role")
            mark = _ROLE_MARKS.get(role) if isinstance(role, str) else None
            if mark is None:
                mark = f"\x1f{role}\x1f".encode()
                if isinstance(role, str) and len(_ROLE_MARKS) < 64:
                    _ROLE_MARKS[role] = mark
            h.update(mark)
            h.update(_normalised(content_text(m.get("content"))))
            if m.get("tool_calls"):
                h.update(repr(m["tool_calls"]).encode())
    params = case.get("params", {})
    for k in ("tools", "response_format"):
        if k in params:  # as logged: the same tools written in another key order count as other tools
            h.update(b"\x1f" + repr(params[k]).encode())
    return int.from_bytes(h.digest(), "big")


_SEEDED: dict[int, Any] = {}
"""The hash state after `<seed>\x1f`, per seed: copying it is cheaper than hashing the prefix again per case."""


def sample_key(seed: int, case_id: str) -> int:
    """The case's place in its stratum's sample: a hash of the seed and its id (uniform over 64 bits)."""
    seeded = _SEEDED.get(seed)
    if seeded is None:
        seeded = _SEEDED[seed] = hashlib.blake2b(f"{seed}\x1f".encode(), digest_size=8)
    h = seeded.copy()
    h.update(case_id.encode())
    return int.from_bytes(h.digest(), "big")


class DigestSet:
    """Prompt digests seen so far: a sorted uint64 array plus a smaller sorted array of recent ones merged into it.

    About 8 bytes a prompt (a Python set of ints costs near 70), so ten
    million lines need some 80 MB here; lookups are done a chunk of lines at
    a time, in numpy.

    Each chunk copies the recent array once (its insert) and each merge
    copies the sorted one: merging when the recent array reaches about 32
    times the square root of the sorted one's size keeps the two costs level
    as the log grows (a chunk holds about a thousand digests), where a fixed
    size favours one length of log.
    """

    _MERGE_AT = 1 << 15
    """The recent array's size at which it is merged, at least."""
    _MERGE_SHIFT = 5
    """log2 of the multiple of the sorted array's square root at which the recent array is merged."""

    def __init__(self) -> None:
        self._base = np.empty(0, dtype=np.uint64)
        self._recent = np.empty(0, dtype=np.uint64)

    def __len__(self) -> int:
        return int(self._base.size) + int(self._recent.size)

    def add_all(self, digests: list[int]) -> list[bool]:
        """For each digest in order: True when first seen (it is then added), False for a repeat."""
        out: list[bool] = self.add_array(np.array(digests, dtype=np.uint64)).tolist()
        return out

    def add_array(self, digests: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """`add_all` for an array of uint64 digests: a boolean array, True where a digest is seen first."""
        out = np.zeros(digests.size, dtype=bool)
        if not digests.size:
            return out
        unique, first = np.unique(digests.astype(np.uint64, copy=False), return_index=True)
        fresh = np.ones(unique.size, dtype=bool)
        for seen in (self._base, self._recent):
            if seen.size:
                at = np.minimum(np.searchsorted(seen, unique), seen.size - 1)
                fresh &= seen[at] != unique
        out[first[fresh]] = True
        self._recent = _merged(self._recent, unique[fresh])
        if self._recent.size >= max(self._MERGE_AT, math.isqrt(self._base.size) << self._MERGE_SHIFT):
            self._base = _merged(self._base, self._recent)
            self._recent = np.empty(0, dtype=np.uint64)
        return out


def _merged(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Two sorted arrays with no value in common as one sorted array."""
    return np.insert(a, np.searchsorted(a, b), b) if b.size else a


POOL_FACTOR = 2
"""Cases kept per sampled case: the pool of smallest keys overall holds about twice a stratum's proportional
share (a Poisson count), so a stratum whose share exceeds `FLOOR` lacks cases with a chance of about one in
a thousand; its shortfall then goes to the other strata. Every candidate costs its redaction, so the
factor is what the speed of a sampled replay turns on."""
FLOOR = 16
"""The smallest keys every stratum keeps for itself (at least the minimum per stratum): its share when
that share is small, where the pool's chance count is not enough."""


class StratifiedSample(Generic[K, T]):
    """The sample's candidates in bounded memory: the pool of smallest keys, and each stratum's floor."""

    def __init__(self, n: int, minimum: int = 1):
        self.n = n
        self.minimum = minimum
        self._pool_cap = POOL_FACTOR * n
        self._floor_cap = max(minimum, FLOOR)
        self._pool: list[tuple[int, int, K, T]] = []
        self._floors: dict[K, list[tuple[int, int, T]]] = {}
        self.counts: dict[K, int] = {}
        """Cases seen per stratum (candidates or not): what allocation is proportional to."""

    def bounds(self) -> tuple[int | None, dict[K, int]]:
        """(the pool's largest key once full, each full floor's largest key): a case at or above both cannot be sampled.

        Both only ever drop, so a worker that checks a case against bounds
        read a little earlier never turns away a case the sample would take.
        """
        pool = -self._pool[0][0] if len(self._pool) >= self._pool_cap else None
        return pool, {s: -h[0][0] for s, h in self._floors.items() if len(h) >= self._floor_cap}

    def count(self, stratum: K, cases: int = 1) -> None:
        """Cases that cannot be sampled (their keys are above the bounds): counted, not kept."""
        self.counts[stratum] = self.counts.get(stratum, 0) + cases

    def offer(self, stratum: K, key: int, seq: int, item: T) -> None:
        self.count(stratum)
        entry = (-key, -seq, stratum, item)
        if len(self._pool) < self._pool_cap:
            heapq.heappush(self._pool, entry)
        elif key < -self._pool[0][0]:
            heapq.heapreplace(self._pool, entry)
        floor = self._floors.setdefault(stratum, [])
        if len(floor) < self._floor_cap:
            heapq.heappush(floor, (-key, -seq, item))
        elif key < -floor[0][0]:
            heapq.heapreplace(floor, (-key, -seq, item))

    def take(self) -> list[tuple[int, T]]:
        """(seq, item) of the sample, in the order the log held them.

        Each stratum's pool cases and floor cases are both its smallest keys;
        the longer of the two lists is what it can give.
        """
        by_stratum: dict[K, dict[int, tuple[int, T]]] = {}
        for key, seq, stratum, item in self._pool:
            by_stratum.setdefault(stratum, {})[-seq] = (-key, item)
        for stratum, floor in self._floors.items():
            got = by_stratum.setdefault(stratum, {})
            if len(floor) > len(got):
                by_stratum[stratum] = {-seq: (-key, item) for key, seq, item in floor}
        available = {s: len(v) for s, v in by_stratum.items()}
        out: list[tuple[int, T]] = []
        for stratum, k in allocate(self.n, self.counts, self.minimum, available).items():
            kept = sorted(by_stratum[stratum].items(), key=lambda e: (e[1][0], e[0]))[:k]
            out += [(seq, item) for seq, (_, item) in kept]
        out.sort(key=lambda e: e[0])
        return out


def allocate(n: int, counts: Mapping[K, int], minimum: int = 1, available: Mapping[K, int] | None = None) -> dict[K, int]:
    """Cases per stratum: proportional to its size (largest remainders), at least `minimum` where it has them.

    Deterministic (ties go to the larger stratum, then by the stratum's repr).
    When `n` cannot give every stratum its minimum, the largest strata get
    theirs first. `available` caps what a stratum can give (what the sample
    kept of it); a stratum's shortfall goes to the others, largest first.
    """
    out = _proportional(n, counts, minimum)
    if available is None:
        return out
    short = 0
    for s, k in out.items():
        cap = available.get(s, 0)
        if k > cap:
            short += k - cap
            out[s] = cap
    for s in sorted(out, key=lambda s: (-counts[s], repr(s))):
        give = min(short, available.get(s, 0) - out[s])
        out[s] += give
        short -= give
    return {s: k for s, k in out.items() if k}


def _proportional(n: int, counts: Mapping[K, int], minimum: int) -> dict[K, int]:
    strata = sorted((s for s, c in counts.items() if c > 0), key=lambda s: (-counts[s], repr(s)))
    total = sum(counts[s] for s in strata)
    if n >= total:
        return {s: counts[s] for s in strata}
    floor_of = {s: min(minimum, counts[s]) for s in strata}
    if sum(floor_of.values()) >= n:
        out = dict.fromkeys(strata, 0)
        left = n
        while left:
            for s in strata:
                if left and out[s] < floor_of[s]:
                    out[s] += 1
                    left -= 1
        return {s: k for s, k in out.items() if k}
    quota = {s: n * counts[s] / total for s in strata}
    out = {s: int(quota[s]) for s in strata}
    by_remainder = sorted(strata, key=lambda s: (-(quota[s] - out[s]), -counts[s], repr(s)))
    left = n - sum(out.values())
    for s in _cycle(by_remainder):
        if not left:
            break
        if out[s] < counts[s]:
            out[s] += 1
            left -= 1
    deficit = 0
    for s in strata:
        if out[s] < floor_of[s]:
            deficit += floor_of[s] - out[s]
            out[s] = floor_of[s]
    while deficit:
        s = max(strata, key=lambda s: (out[s] - floor_of[s], counts[s], repr(s)))
        out[s] -= 1
        deficit -= 1
    return {s: k for s, k in out.items() if k}


def _cycle(items: list[K]) -> Iterable[K]:
    while items:
        yield from items
