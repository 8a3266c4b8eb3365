"""The controller emulators of `controllers.py` hold to what they claim from Argo Rollouts, expr and Flagger.

The controller tests are only as good as these: each case here is a rule
read from the controllers' sources (cited in `controllers.py`) where a
plain Python reading would differ (`1 == true` is false in expr, a 203 is
a no for Flagger, a 501 is not retried).
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from tests.helpers import raw_server
from tests.unit.canary.controllers import (
    ERROR,
    FAILED,
    INCONCLUSIVE,
    SUCCESSFUL,
    AnalysisMetric,
    ExprError,
    Measurement,
    eval_condition,
    evaluate_result,
    flagger_call,
    json_path,
    substitute,
    web_measure,
)


@pytest.mark.parametrize(
    ("condition", "result", "expected"),
    [
        ("result.passed == true", {"passed": True}, True),
        ("result.passed == true", {"passed": None}, False),
        ("result.passed == true", {"passed": 1}, False),  # a number is never a boolean
        ("result.passed == false", {"passed": 0}, False),
        ("result.passed == false", {}, False),  # a map's missing key is nil
        ("result.missing == nil", {}, True),
        ("result == 'pass'", "pass", True),
        ('result != "pass"', "fail", True),
        ("result == 1", 1.0, True),  # numbers by value, int or float
        ("len(result) > 0 && all(result, {# == 1})", [], False),
        ("len(result) > 0 && all(result, {# == 1})", [1.0, 1.0], True),
        ("len(result) > 0 && all(result, {# == 1})", [1.0, -1.0], False),
        ("all(result, {# == 1})", [], True),
        ("any(result, {# == 0})", [], False),
        ("any(result, {# == 0})", [1.0, 0.0], True),
        ("result[0] >= 0.5 and result[-1] < 2", [0.5, 1.5], True),
        ("not result.ok || result.n <= 3", {"ok": True, "n": 3}, True),
        ("!(result.ok)", {"ok": False}, True),
        ("result.ok && result.n > 5", {"ok": False, "n": "x"}, False),  # short-circuit: the right side never runs
    ],
)
def test_expr_subset_evaluates_as_expr_does(condition: str, result: Any, expected: bool) -> None:
    assert eval_condition(condition, result) is expected


@pytest.mark.parametrize(
    ("condition", "result"),
    [
        ("result.a.b == 1", {"a": None}),  # cannot fetch b from nil
        ("result[0] == 1", []),  # index out of range
        ("result > 1", "x"),  # string > number
        ("result || true", {"ok": True}),  # a map is not a boolean
        ("result.passed", {"passed": None}),  # the condition must come out a boolean
        ("asInt(result) > 1", "3"),  # in Argo's env, outside the subset: refused rather than guessed
        ("unknown == 1", 1),
        ("result ==", 1),
    ],
)
def test_expr_subset_refuses_what_expr_refuses_or_what_it_does_not_cover(condition: str, result: Any) -> None:
    with pytest.raises(ExprError):
        eval_condition(condition, result)


@pytest.mark.parametrize(
    ("success", "failure", "result", "phase"),
    [
        ("result == 1", "result == 0", 1, SUCCESSFUL),
        ("result == 1", "result == 0", 0, FAILED),
        ("result == 1", "result == 0", -1, INCONCLUSIVE),  # neither condition: Inconclusive
        ("result == 1", "", -1, FAILED),  # a success condition alone: not successful is failed
        ("", "result == 0", -1, SUCCESSFUL),  # a failure condition alone: not failed is successful
        ("", "", 0, SUCCESSFUL),
        ("result == 1", "result.x == 0", 1, ERROR),  # an evaluation error
        ("result >= 0", "result >= 0", 1, FAILED),  # failure wins
    ],
)
def test_evaluate_result_follows_argos_evaluate_result(success: str, failure: str, result: Any, phase: str) -> None:
    metric = {k: v for k, v in (("successCondition", success), ("failureCondition", failure)) if v}
    assert evaluate_result(result, metric) == phase


def test_json_path_subset() -> None:
    data = {"routes": {"chat": {"passed": True}, "a.b": 1}}
    assert json_path("{$}", data) == data
    assert json_path("{$.routes.chat}", data) == {"passed": True}
    assert json_path("{.routes.chat.passed}", data) is True
    assert json_path("{$.routes.a\\.b}", data) == 1
    with pytest.raises(KeyError, match="billing is not found"):
        json_path("{$.routes.billing}", data)
    with pytest.raises(ValueError, match="outside the emulated subset"):
        json_path("{$.routes[0]}", data)


def test_args_are_substituted_and_a_missing_one_is_an_error() -> None:
    assert substitute({"jsonPath": "{$.routes.{{args.route}}}", "n": ["{{ args.route }}"]}, {"route": "chat"}) == {
        "jsonPath": "{$.routes.chat}",
        "n": ["chat"],
    }
    with pytest.raises(KeyError):
        substitute("{{args.namespace}}", {})


def test_analysis_metric_limits() -> None:
    run = AnalysisMetric({"failureLimit": 1, "inconclusiveLimit": 1, "consecutiveErrorLimit": 1})
    assert run.add(Measurement(FAILED)) == "Running"
    assert run.add(Measurement(INCONCLUSIVE)) == "Running"
    assert run.add(Measurement(ERROR)) == "Running"
    assert run.add(Measurement(SUCCESSFUL)) == "Running"  # a measurement resets the consecutive errors
    assert run.add(Measurement(ERROR)) == "Running"
    assert run.add(Measurement(ERROR)) == ERROR
    assert AnalysisMetric({}).add(Measurement(FAILED)) == FAILED  # failureLimit defaults to 0
    assert AnalysisMetric({}).add(Measurement(INCONCLUSIVE)) == INCONCLUSIVE
    assert AnalysisMetric({"count": 2}).add(Measurement(SUCCESSFUL)) == "Running"
    two = AnalysisMetric({"count": 2})
    two.add(Measurement(SUCCESSFUL))
    assert two.add(Measurement(SUCCESSFUL)) == SUCCESSFUL
    both = AnalysisMetric({"failureLimit": 0, "inconclusiveLimit": 0})
    both.add(Measurement(FAILED))
    assert both.add(Measurement(INCONCLUSIVE)) == INCONCLUSIVE  # the later check wins, as in assessMetricFailureInconclusiveOrError


def test_flagger_call_reads_200_to_202_as_yes_and_retries_as_retryablehttp() -> None:
    hits: list[int] = []
    answers = iter([202, 203, 500, 500, 500, 501, 429, 200])

    async def handler(request: web.Request) -> web.Response:
        status = next(answers)
        hits.append(status)
        return web.Response(status=status, text=f"said {status}")

    with raw_server(handler) as url:
        assert flagger_call(url, {"name": "x"}) is None
        assert flagger_call(url, {"name": "x"}) == "said 203"
        assert "unexpected HTTP status 500" in (flagger_call(url, {"name": "x"}, retries=2) or "")
        assert flagger_call(url, {"name": "x"}, retries=2) == "said 501"  # 501 is not retried
        assert flagger_call(url, {"name": "x"}, retries=1) is None  # 429 is
    assert hits == [202, 203, 500, 500, 500, 501, 429, 200]


def test_argo_web_takes_a_2xx_body_that_is_not_json_as_successful_without_conditions() -> None:
    async def text(request: web.Request) -> web.Response:
        return web.Response(text="qc_canary_guardrail_passed 0\n")

    metric = {"successCondition": "result.passed == true", "failureCondition": "result.passed == false"}
    with raw_server(text) as url:
        m = web_measure({**metric, "provider": {"web": {"url": url + "/qc/metrics", "jsonPath": "{$.routes.chat}"}}}, {})
    assert m.phase == SUCCESSFUL and m.value.startswith("qc_canary_guardrail_passed")  # why the URL must be /qc/status
