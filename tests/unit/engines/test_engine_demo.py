"""The demo's case selection and its self-contained suite copy (no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualitycheck.cli._main import build_parser
from qualitycheck.core._cases import load_suite
from qualitycheck.core._errors import QualitycheckError
from qualitycheck.pipeline._demo import DEMO_MAX_TOKENS, demo_cases, run_demo, write_suite

ROOT = Path(__file__).resolve().parents[3]


def _case(i: int, category: str, demo: bool, max_tokens: int | None = None) -> dict:
    c = {
        "id": f"c{i}",
        "category": category,
        "messages": [{"role": "user", "content": "hi"}],
        "checks": {"contains": "x"},
        "tags": {"demo": "yes"} if demo else {},
    }
    if max_tokens:
        c["params"] = {"max_tokens": max_tokens}
    return c


def test_only_demo_tagged_cases_are_chosen_and_max_tokens_is_capped(tmp_path: Path) -> None:
    suite = tmp_path / "s.jsonl"
    suite.write_text("\n".join(json.dumps(_case(i, "qa", i % 2 == 0, 500 if i == 0 else None)) for i in range(5)))
    cases = demo_cases([str(suite)])
    assert [c.id for c in cases] == ["c0", "c2", "c4"]
    assert all(c.params["max_tokens"] == DEMO_MAX_TOKENS for c in cases)


def test_untagged_suites_give_three_cases_per_category(tmp_path: Path) -> None:
    suite = tmp_path / "s.jsonl"
    suite.write_text("\n".join(json.dumps(_case(i, "qa" if i < 5 else "sql", False, 16)) for i in range(8)))
    cases = demo_cases([str(suite)])
    assert [c.id for c in cases] == ["c0", "c1", "c2", "c5", "c6", "c7"]
    assert all(c.params["max_tokens"] == 16 for c in cases), "a smaller limit of the case is kept"


def test_project_demo_suite_copy_loads_back_identically(tmp_path: Path) -> None:
    """The copy in the run folder must stand alone: fixture paths absolute, schemas inline."""
    cases = demo_cases([str(ROOT / "suites")])
    assert len({c.category for c in cases}) >= 4, "the demo should show several categories"
    copy = write_suite(cases, tmp_path / "demo-suite.jsonl")
    again = load_suite([str(copy)])
    assert [c.content_hash() for c in again] == [c.content_hash() for c in cases]


def test_demo_refuses_a_used_out_folder_before_starting_anything(tmp_path: Path) -> None:
    (tmp_path / "run.sqlite").write_text("")
    with pytest.raises(QualitycheckError, match="not empty"):
        run_demo(tmp_path)


def test_cli_has_demo_with_out() -> None:
    args = build_parser().parse_args(["demo", "--out", "x"])
    assert args.command == "demo" and args.out == "x"


def test_demo_finds_the_checkout_suites_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qualitycheck.pipeline._demo import default_suites

    monkeypatch.chdir(tmp_path)
    assert default_suites() == [str(ROOT / "suites")]
    (tmp_path / "suites").mkdir()
    assert default_suites() == ["suites"]
