"""preflight_consistent never passes on nothing: a preflight that could check nothing is not evaluated."""

from __future__ import annotations

from typing import Any

from qualitycheck.core._records import PreflightRecord
from qualitycheck.verdict._gate import Evidence, PreflightConsistent, decide


def _check(name: str, passed: bool | None, detail: str = "") -> dict[str, Any]:
    return {"name": name, "passed": passed, "detail": detail}


def _evaluate(*checks: dict[str, Any]) -> Any:
    record = PreflightRecord.model_validate({"ok": True, "baseline": "b", "candidate": "c", "model": "m", "checks": list(checks)})
    return PreflightConsistent().evaluate(Evidence(preflight=record))


NOTHING_EXPOSED = [
    _check("served_model", None, "baseline: http://b/v1/models: HTTP 404"),
    _check("tokenize", None, "/tokenize not usable: HTTP 404"),
    _check("tokenizer_and_stop_tokens", None, "not exposed (HTTP 404)"),
    _check("generation_defaults", None, "not exposed (HTTP 404)"),
    _check("engine_version", None, "version not exposed: HTTP 404"),
]


def test_servers_exposing_none_of_the_endpoints_leave_the_guardrail_not_evaluated() -> None:
    r = _evaluate(*NOTHING_EXPOSED)
    assert r.passed is None and r.observed is None
    assert r.message.startswith("not evaluated: no preflight check could be performed")
    for endpoint in ("/v1/models", "/tokenize", "/tokenizer_info", "/server_info", "/version"):
        assert endpoint in r.message
    verdict, _ = decide([r], {"qa": "pass"}, allow_not_evaluated=False, fallback_action="off", category_routes={"qa": {"qa"}})
    assert verdict == "inconclusive"  # never counted as passed


def test_a_preflight_that_recorded_no_check_is_not_evaluated_either() -> None:
    r = _evaluate()
    assert r.passed is None and "no preflight check could be performed" in r.message


def test_some_checks_made_and_none_failed_passes_and_names_what_was_not_checked() -> None:
    r = _evaluate(_check("served_model", True, "both serve 'm'"), _check("tokenize", True, "identical"), *NOTHING_EXPOSED[2:])
    assert r.passed is True and r.observed == []
    assert "match on served_model, tokenize" in r.message
    assert "not checked: tokenizer_and_stop_tokens, generation_defaults, engine_version" in r.message
    assert "/tokenizer_info, /server_info, /version" in r.message


def test_a_mismatch_still_fails_whatever_could_not_be_checked() -> None:
    r = _evaluate(_check("tokenize", False, "2/4 cases tokenize differently"), *NOTHING_EXPOSED[2:])
    assert r.passed is False and r.observed == ["tokenize"] and "2/4 cases tokenize differently" in r.message
