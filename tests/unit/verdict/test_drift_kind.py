"""A format feature's kind (rate or mean) is the one declared with it, the same in every category."""

from __future__ import annotations

from typing import Any

from qualitycheck.scoring._format import FEATURE_KINDS, format_features
from qualitycheck.verdict._drift import DriftSamples, add_drift, format_drift
from qualitycheck.verdict._summary import build_summary
from tests.unit.verdict.verdict_builders import make_store

ONE_ITEM = "Steps:\n- check the invoice\n1. pay it"
"""One bullet and one numbered line: counts that happen to be 0 or 1, like a bool's values."""
MANY_ITEMS = "Steps:\n- check the invoice\n- check the order\n- check the refund\n1. pay it\n2. file it\n3. close it"


def _drift(texts: dict[str, list[tuple[str, str]]]) -> dict[str, dict[str, dict[str, Any]]]:
    samples: dict[str, dict[str, DriftSamples]] = {}
    for cat, pairs in texts.items():
        into = samples.setdefault(cat, {})
        for b, c in pairs:
            add_drift(into, format_features(b), format_features(c), None)
    return format_drift(samples)


def test_a_count_is_a_mean_in_a_category_where_it_is_only_ever_0_or_1() -> None:
    drift = _drift(
        {
            "short": [("Fine.", ONE_ITEM), (ONE_ITEM, ONE_ITEM), (ONE_ITEM, "Fine.")],
            "long": [(MANY_ITEMS, MANY_ITEMS), (ONE_ITEM, MANY_ITEMS), ("Fine.", MANY_ITEMS)],
        }
    )
    for feature in ("markdown_bullets", "numbered_items"):
        assert drift["short"][feature]["kind"] == drift["long"][feature]["kind"] == "mean"


def test_a_bool_is_a_rate_even_where_it_never_varies() -> None:
    drift = _drift({"flat": [("Fine.", "Fine.")] * 3, "mixed": [("Fine.", ONE_ITEM), (ONE_ITEM, "Fine.")]})
    for cat in ("flat", "mixed"):
        assert drift[cat]["bullets_dash"]["kind"] == drift[cat]["empty"]["kind"] == "rate"
        assert drift[cat]["chars"]["kind"] == "mean"


def test_every_feature_in_the_summary_carries_its_declared_kind(tmp_path: Any) -> None:
    rows = [
        {"id": f"a{i}", "category": "short", "texts": {"baseline": ONE_ITEM, "candidate": ONE_ITEM if i % 2 else "Fine."}} for i in range(6)
    ]
    rows += [
        {"id": f"b{i}", "category": "long", "texts": {"baseline": MANY_ITEMS, "candidate": ONE_ITEM if i % 2 else MANY_ITEMS}}
        for i in range(6)
    ]
    with make_store(tmp_path, rows) as store:
        s = build_summary(store).model_dump(mode="json")
    for cat in ("short", "long"):
        drift = s["categories"][cat]["format_drift"]
        assert {name: d["kind"] for name, d in drift.items()} == {name: FEATURE_KINDS[name] for name in drift}
        assert drift["markdown_bullets"]["kind"] == "mean"


def test_a_feature_declared_nowhere_is_a_mean() -> None:
    samples = {"c": {"custom_flag": DriftSamples()}}
    for b, c in ((0, 1), (1, 1), (0, 0)):
        samples["c"]["custom_flag"].b.append(b)
        samples["c"]["custom_flag"].c.append(c)
    assert format_drift(samples)["c"]["custom_flag"]["kind"] == "mean"
