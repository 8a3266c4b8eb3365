from __future__ import annotations

from qualitycheck.verdict._compare import CaseComparison, compare_run, first_divergence, similarity
from tests.unit.verdict.verdict_builders import make_store


def test_first_divergence_on_chars_tokens_and_prefixes():
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abcd", "abXd") == 2
    assert first_divergence("abc", "abcdef") == 3
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1


def test_similarity_is_difflib_ratio_and_bounded_for_huge_texts():
    import difflib

    a, b = "the quick brown fox jumps", "the quick red fox jumped"
    got, exact = similarity(a, b)
    assert exact and abs(got - difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()) < 1e-9
    big_a, big_b = "x" * 50 + "ab" * 20000, "x" * 50 + "ba" * 20000
    got, exact = similarity(big_a, big_b)
    assert not exact and 0.0 < got <= 1.0


def test_flips_divergence_and_persisted_records(tmp_path):
    rows = [
        {
            "id": "a",
            "category": "json",
            "texts": {"baseline": "hello world", "candidate": "hello there"},
            "tokens": {"baseline": [1, 2], "candidate": [1, 3]},
            "checks": {"exact": {"baseline": "pass", "candidate": "fail"}},
        },
        {
            "id": "b",
            "category": "json",
            "route": "r2",
            "checks": {"exact": {"baseline": "fail", "candidate": "pass"}, "json_parse": {"baseline": "pass", "candidate": "error"}},
        },
        {"id": "c", "category": "sql", "texts": {"baseline": "x", "candidate": None}},
    ]
    with make_store(tmp_path, rows) as store:
        got: list = []
        assert compare_run(store, consume=got.extend) == 3
        comps = {c.case_id: c for c in got}
        a, b, c = comps["a"], comps["b"], comps["c"]
        assert a.regressions == ["exact"] and not a.identical
        assert a.divergence_char == 6 and a.divergence_token == 1 and 0 < a.similarity < 1
        assert b.improvements == ["exact"] and b.identical and b.route == "r2"
        assert b.checks["json_parse"].flip is None  # an error is not a fail
        assert c.candidate_ok is False and c.identical is None and c.divergence_char is None
        again = {x.case_id: x for x in map(CaseComparison.model_validate_json, store.comparison_bodies())}
        assert again == comps
