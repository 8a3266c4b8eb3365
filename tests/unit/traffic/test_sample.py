"""Stratified sampling in bounded memory, deterministic by seed; repeated prompts recognised by 8-byte digests."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from qualitycheck.traffic import _sample
from qualitycheck.traffic._rules import Drafted
from qualitycheck.traffic._sample import (
    POOL_FACTOR,
    DigestSet,
    StratifiedSample,
    Stratum,
    allocate,
    prompt_digest,
    sample_key,
    stratum_of,
)


def test_allocation_is_proportional_and_adds_up() -> None:
    counts = {"a": 600, "b": 300, "c": 100}
    assert allocate(100, counts) == {"a": 60, "b": 30, "c": 10}
    out = allocate(7, counts)
    assert sum(out.values()) == 7 and out["a"] >= out["b"] >= out["c"] >= 1


def test_every_non_empty_stratum_gets_its_minimum() -> None:
    counts = {"big": 10_000, "small": 3, "tiny": 1, "empty": 0}
    out = allocate(20, counts, minimum=2)
    assert out == {"big": 17, "small": 2, "tiny": 1} and "empty" not in out
    assert allocate(2, {"a": 5, "b": 4, "c": 3}, minimum=1) == {"a": 1, "b": 1}  # too few for all: the largest first
    assert allocate(50, {"a": 5, "b": 4}) == {"a": 5, "b": 4}  # asking for more than there is takes all


def test_allocation_respects_what_a_stratum_can_give() -> None:
    out = allocate(100, {"a": 600, "b": 300, "c": 100}, available={"a": 1000, "b": 20, "c": 1000})
    assert out == {"a": 70, "b": 20, "c": 10}


def test_allocation_is_deterministic_whatever_the_order() -> None:
    counts = {f"s{i}": (i * 37) % 7 + 1 for i in range(40)}  # many strata of one size: only the tie-break orders them
    shuffled = dict(random.Random(3).sample(list(counts.items()), len(counts)))
    assert list(shuffled) != list(counts)
    assert allocate(123, counts, 2) == allocate(123, shuffled, 2)
    assert sum(allocate(123, counts, 2).values()) == 123


def _fill(sample: StratifiedSample[str, int], items: list[tuple[str, int]], seed: int) -> None:
    for seq, (stratum, ident) in enumerate(items, 1):
        sample.offer(stratum, sample_key(seed, f"case-{ident}"), seq, ident)


def test_the_sample_is_the_same_whatever_the_order_and_differs_by_seed() -> None:
    items = [(f"s{i % 7}", i) for i in range(5000)]
    a: StratifiedSample[str, int] = StratifiedSample(100)
    _fill(a, items, seed=1)
    b: StratifiedSample[str, int] = StratifiedSample(100)
    _fill(b, random.Random(5).sample(items, len(items)), seed=1)
    c: StratifiedSample[str, int] = StratifiedSample(100)
    _fill(c, items, seed=2)
    pick = lambda s: sorted(item for _, item in s.take())  # noqa: E731
    assert pick(a) == pick(b) and len(pick(a)) == 100 and pick(a) != pick(c)


def test_the_sample_is_stratified_and_uniform_within_a_stratum() -> None:
    # a skewed log: 90% in one stratum; a uniform draw would often miss the rare ones
    items = [("common", i) for i in range(9000)] + [("rare", 9000 + i) for i in range(900)] + [("rarest", 9900 + i) for i in range(100)]
    sample: StratifiedSample[str, int] = StratifiedSample(200, minimum=5)
    _fill(sample, items, seed=0)
    got = Counter("common" if i < 9000 else "rare" if i < 9900 else "rarest" for _, i in sample.take())
    assert got == {"common": 177, "rare": 18, "rarest": 5}  # 180, 18, 2 proportional; the minimum takes 3 from the largest
    # within a stratum every case is as likely: over many seeds the first and second half are drawn alike
    halves = Counter()
    for seed in range(200):
        s: StratifiedSample[str, int] = StratifiedSample(20)
        _fill(s, [("only", i) for i in range(1000)], seed)
        halves.update("first" if i < 500 else "second" for _, i in s.take())
    assert abs(halves["first"] - halves["second"]) < 0.1 * 4000


def test_memory_is_bounded_by_the_sample_not_the_log() -> None:
    sample: StratifiedSample[tuple[str, int], int] = StratifiedSample(50)
    strata = [("s", k) for k in range(12)]
    for seq in range(1, 100_001):
        sample.offer(strata[seq % 12], sample_key(0, str(seq)), seq, seq)
    kept = len(sample._pool) + sum(len(f) for f in sample._floors.values())
    assert kept <= POOL_FACTOR * 50 + 12 * _sample.FLOOR
    assert sum(sample.counts.values()) == 100_000 and len(sample.take()) == 50


def test_bounds_say_which_cases_cannot_be_taken() -> None:
    sample: StratifiedSample[str, int] = StratifiedSample(2, minimum=1)
    assert sample.bounds() == (None, {})
    keys = [sample_key(9, str(i)) for i in range(40)]
    for seq, k in enumerate(keys, 1):
        sample.offer("a", k, seq, seq)
    pool, floors = sample.bounds()
    assert pool == sorted(keys)[POOL_FACTOR * 2 - 1] and floors == {"a": sorted(keys)[_sample.FLOOR - 1]}
    # a case counted (not offered) because its key was above the bounds changes only the counts
    before = sample.take()
    sample.count("a")
    assert sample.take() == before and sample.counts["a"] == 41


def test_digests_find_repeats_across_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DigestSet, "_MERGE_AT", 64)
    seen = DigestSet()
    first = seen.add_all(list(range(1000)))
    assert all(first) and len(seen) == 1000 and seen._base.size >= 900  # merged into the sorted array
    again = seen.add_all([5, 999, 1000, 1000, 2**64 - 1])
    assert again == [False, False, True, False, True]


def _case(text: str, category: str = "qa", **params: object) -> dict[str, object]:
    return {"category": category, "messages": [{"role": "user", "content": text}], "params": dict(params)}


def test_prompts_repeat_after_case_and_whitespace_are_normalised() -> None:
    assert prompt_digest(_case("What is  the\ncapital of France?")) == prompt_digest(_case(" what is the capital OF france? "))
    assert prompt_digest(_case("Qu’est-ce  QUE ÇA?")) == prompt_digest(_case("qu’est-ce que ça?"))  # case beyond ASCII too
    assert prompt_digest(_case("What is the capital of France?")) != prompt_digest(_case("What is the capital of Spain?"))
    assert prompt_digest(_case("x")) != prompt_digest(_case("x", category="other"))
    assert prompt_digest(_case("x")) != prompt_digest(_case("x", tools=[{"type": "function", "function": {"name": "f"}}]))
    assert prompt_digest(_case("x")) == prompt_digest(_case("x", temperature=0.5))  # settings do not make another question
    assert 0 <= prompt_digest(_case("x")) < 2**64


def test_strata_buckets() -> None:
    def st(tokens: int | None, temp: float, chars: int, system: bool) -> Stratum:
        return stratum_of(Drafted(case={}, category="qa", prompt_chars=chars, has_system=system, temperature=temp, output_tokens=tokens))

    assert st(None, 0, 10, False) == Stratum("qa", "unknown", "greedy", "short", False)
    assert st(64, 0.7, 500, True) == Stratum("qa", "short", "low", "short", True)
    assert st(65, 1.0, 501, False) == Stratum("qa", "medium", "high", "medium", False)
    assert st(2000, 1.0, 9000, False).output == "very_long" and st(2000, 1.0, 9000, False).prompt == "very_long"
    assert Stratum("qa", "short", "low", "short", True).key() == "qa/out=short/temp=low/prompt=short/system=yes"


def test_digest_arrays_mark_first_sightings_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """`add_array` says what a set would, a chunk at a time: repeats within a chunk, across chunks and across merges."""
    import numpy as np

    monkeypatch.setattr(DigestSet, "_MERGE_AT", 50)
    monkeypatch.setattr(DigestSet, "_MERGE_SHIFT", 0)
    rng = np.random.default_rng(3)
    seen, naive = DigestSet(), set()
    merged_into = []
    for size in (0, 1, 30, 200, 7, 500, 64, 300, 120):
        base_before = seen._base.size
        chunk = rng.integers(0, 1500, size, dtype=np.uint64)
        chunk[: size // 10] = np.uint64(2**64 - 1 - size % 3)  # values beyond int64 too
        want = []
        for d in chunk.tolist():
            want.append(d not in naive)
            naive.add(d)
        assert seen.add_array(chunk).tolist() == want
        assert len(seen) == len(naive)
        if seen._base.size > base_before:
            merged_into.append(base_before)
    assert len([n for n in merged_into if n]) >= 2, merged_into  # merges into a sorted array that held digests already


def test_keys_and_digests_are_the_documented_hashes() -> None:
    """The cached hash states give the hashes written out in full: a sample does not change with how they are computed."""
    import hashlib

    from qualitycheck.traffic._rules import content_text

    for seed, case_id in ((0, "a"), (7, "traffic-12"), (-3, "é-ü"), (10**20, "x" * 300)):
        full = hashlib.blake2b(f"{seed}\x1f{case_id}".encode(), digest_size=8).digest()
        assert sample_key(seed, case_id) == int.from_bytes(full, "big")
    case = {
        "category": "qa",
        "messages": [{"role": "system", "content": "Be BRIEF.\t"}, {"role": "user", "content": [{"type": "text", "text": "Ça  VA?\r\n"}]}],
        "params": {"tools": [{"type": "function"}]},
    }
    h = hashlib.blake2b(b"qa", digest_size=8)
    for m in case["messages"]:
        text = content_text(m["content"]).lower().encode().translate(None, b" \t\n\r\x0b\x0c")
        h.update(f"\x1f{m['role']}\x1f".encode() + text)
    h.update(b"\x1f" + repr(case["params"]["tools"]).encode())
    assert prompt_digest(case) == int.from_bytes(h.digest(), "big")


def test_text_beyond_ascii_normalises_as_str_lower_does() -> None:
    """Text whose characters beyond ASCII `str.lower` leaves alone is lower-cased as bytes; it must give what
    `str.lower` gives, for every mix of those with characters it changes (sigma depends on what follows it)."""
    chars = [*"aZ \t\n1’“”—ßıσςé", "Σ", "İ", "K", "É", "ǅ", "ẞ", "Ω", "\ud800", "\U0001d400", "ﬀ"]

    def by_str_lower(text: str) -> bytes:
        return text.lower().encode("utf-8", "surrogatepass").translate(None, b" \t\n\r\x0b\x0c")

    rng = random.Random(3)
    texts = [a + b + c for a in chars for b in chars for c in chars]
    texts += ["".join(rng.choice(chars) for _ in range(rng.randint(4, 40))) for _ in range(5000)]
    texts += ["Qu’est-ce QUE “ça”? — Rien.", "ΟΔΟΣ ΣΑΣ", "İSTANBUL", "The Kelvin sign: 5 K"]
    assert [_sample._normalised(t) for t in texts] == [by_str_lower(t) for t in texts]
