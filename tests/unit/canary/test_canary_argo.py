"""Argo Rollouts reading the watcher: the AnalysisTemplates of docs/examples/canary/argo-rollouts.yaml, as they are,
measured the way Argo's web and prometheus providers measure (`controllers.py`) against a served watcher.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.canary._quality import QualityWindow
from tests.unit.canary.canary_helpers import WITH_QUALITY, Live, example_docs, live_watcher, status_of, vllm_page
from tests.unit.canary.controllers import ERROR, FAILED, INCONCLUSIVE, SUCCESSFUL, AnalysisMetric, prometheus_measure, web_measure


def _template(name: str) -> dict[str, Any]:
    (doc,) = [d for d in example_docs("argo-rollouts.yaml") if d["kind"] == "AnalysisTemplate" and d["metadata"]["name"] == name]
    (metric,) = doc["spec"]["metrics"]
    return dict(metric)


def _at(metric: dict[str, Any], live_url: str) -> dict[str, Any]:
    """The template's metric with the in-cluster Service replaced by the live watcher (the path and everything else kept)."""
    web = dict(metric["provider"]["web"])
    service = "http://qc-canary.llm.svc:9100"
    assert web["url"].startswith(service + "/"), web["url"]
    web["url"] = live_url + web["url"][len(service) :]
    return {**metric, "provider": {"web": web}}


WINDOW = _template("qualitycheck-window")
GATE = _template("qualitycheck-promotion")
PROM = _template("qualitycheck-window-prometheus")


# ------------------------------------------------------------------ the web provider


def test_argo_web_maps_pass_fail_and_not_evaluated_to_successful_failed_inconclusive(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        metric = _at(WINDOW, live.url)
        before = web_measure(metric, {"route": "default"})
        live.window(0.8)
        passing = web_measure(metric, {"route": "default"})
        live.window(0.2)
        failing = web_measure(metric, {"route": "default"})
        live.window(0.8, drafts=3)  # below the evidence minimum: not evaluated
        thin = web_measure(metric, {"route": "default"})
    assert before.phase == INCONCLUSIVE  # an answer without a decision, never an Error counted toward aborting
    assert passing.phase == SUCCESSFUL and json.loads(passing.value)["passed"] is True
    assert failing.phase == FAILED and "min_acceptance_rate failed" in json.loads(failing.value)["reason"]
    assert thin.phase == INCONCLUSIVE and "3 drafts in the window" in json.loads(thin.value)["reason"]


def test_argo_web_reads_each_route_by_its_arg_and_a_route_not_watched_is_an_error(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", routes=["chat", "billing"], routes_overrides={"billing": {"min_acceptance_rate": 0.9}}) as live:
        live.window(0.8)
        metric = _at(WINDOW, live.url)
        chat, billing, typo = (web_measure(metric, {"route": r}) for r in ("chat", "billing", "chta"))
    assert (chat.phase, billing.phase) == (SUCCESSFUL, FAILED)
    assert typo.phase == ERROR and "chta is not found" in typo.message


def test_argo_web_stale_status_is_inconclusive(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        live.window(0.8)
        live.clock.advance(live.watcher.stale_after_s + 1)
        m = web_measure(_at(WINDOW, live.url), {"route": "default"})
    assert m.phase == INCONCLUSIVE


def test_argo_web_connection_error_is_an_error_and_the_template_aborts_after_its_consecutive_error_limit(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        live.window(0.8)
        metric = _at(WINDOW, live.url)
        run = AnalysisMetric(metric)
        assert run.add(web_measure(metric, {"route": "default"})) == "Running"
    # the watcher is gone: connection refused
    down = web_measure(metric, {"route": "default"})
    assert down.phase == ERROR
    phases = [run.add(down) for _ in range(int(WINDOW["consecutiveErrorLimit"]) + 1)]
    assert phases == ["Running"] * int(WINDOW["consecutiveErrorLimit"]) + [ERROR]


def test_argo_web_timeout_is_an_error_yet_a_slow_window_never_holds_the_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()

    def slow_quality(*args: Any) -> QualityWindow:  # a large run folder being summarised
        started.set()
        release.wait(30)
        return QualityWindow(error="the run folder is being summarised")

    monkeypatch.setattr("qualitycheck.canary._watch.quality_window", slow_quality)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with live_watcher(tmp_path / "out", run_dir=run_dir, guardrails=WITH_QUALITY) as live:
        metric = {**_at(WINDOW, live.url), "provider": {"web": {**_at(WINDOW, live.url)["provider"]["web"], "timeoutSeconds": 1}}}
        live.page.text = vllm_page(drafts=100, draft_tokens=300, accepted=240, requests=10)
        live.clock.advance(10)
        deciding = live.submit(live.watcher.step())
        assert started.wait(30)
        during = web_measure(metric, {"route": "default"})  # asked while the window is being decided
        release.set()
        deciding.result(30)
    assert during.phase == INCONCLUSIVE  # answered from what is known (no window yet), within the 1 s timeout

    async def hang(request: Any) -> Any:
        import asyncio

        await asyncio.sleep(1.5)  # beyond the 1 s timeout

    from tests.helpers import raw_server

    with raw_server(hang) as slow:
        late = web_measure({**metric, "provider": {"web": {**metric["provider"]["web"], "url": slow + "/qc/status"}}}, {"route": "default"})
    assert late.phase == ERROR and "timed out" in late.message


def _argo_beside_watcher(out: Path, windows: tuple[float | None, ...]) -> list[tuple[str, str]]:
    """The background template and a dry-run watcher with `--trip-after` = failureLimit + 1, window by window."""
    with live_watcher(out, dry_run=True, trip_after=int(WINDOW["failureLimit"]) + 1) as live:
        metric = _at(WINDOW, live.url)
        run = AnalysisMetric(metric)
        seen = []
        for acceptance in windows:
            live.window(acceptance)
            phase = run.add(web_measure(metric, {"route": "default"}))
            seen.append((phase, status_of(live)["routes"]["default"]["state"]))
    return seen


def test_argo_failure_limit_fails_the_analysis_on_the_window_the_dry_run_watcher_trips(tmp_path: Path) -> None:
    seen = _argo_beside_watcher(tmp_path / "out", (0.8, 0.2, None, 0.2, 0.2))
    # a window without evidence neither adds to nor resets the watcher's streak; Argo counts it Inconclusive, not Failed
    assert seen == [("Running", "armed")] * 4 + [(FAILED, "tripped")]
    assert not (tmp_path / "out" / "canary_state.json").exists()  # --dry-run: nothing taken for an action


def test_argo_failure_limit_counts_every_failed_window_where_the_watcher_counts_consecutive_ones(tmp_path: Path) -> None:
    seen = _argo_beside_watcher(tmp_path / "out", (0.2, 0.8, 0.2, 0.8, 0.2))
    assert seen[-1] == (FAILED, "armed")  # passing windows in between reset the watcher's streak, not Argo's count


def test_argo_reading_the_watchers_trip_fails_on_the_trip_with_failure_limit_0(tmp_path: Path) -> None:
    owned = {k: v for k, v in WINDOW.items() if k != "successCondition"}
    owned |= {"failureCondition": 'result.state == "tripped"', "failureLimit": 0}  # the watcher owns the decision
    with live_watcher(tmp_path / "out", trip_after=2) as live:
        metric = _at(owned, live.url)
        run = AnalysisMetric(metric)
        phases = []
        for acceptance in (0.2, 0.2):
            live.window(acceptance)
            phases.append(run.add(web_measure(metric, {"route": "default"})))
    assert phases == ["Running", FAILED]  # a failing window alone is not a failure here: only the trip is


def test_argo_inconclusive_limit_pauses_after_that_many_windows_without_evidence(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        metric = _at(WINDOW, live.url)
        run = AnalysisMetric(metric)
        phases = []
        for _ in range(int(WINDOW["inconclusiveLimit"]) + 1):
            live.window(None)
            phases.append(run.add(web_measure(metric, {"route": "default"})))
    assert phases[:-1] == ["Running"] * int(WINDOW["inconclusiveLimit"]) and phases[-1] == INCONCLUSIVE


def test_argo_promotion_gate_needs_a_passing_window(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        metric = _at(GATE, live.url)
        live.window(0.8, drafts=3)
        undecided = AnalysisMetric(metric).add(web_measure(metric, {"route": "default"}))
        live.window(0.8)
        passed = AnalysisMetric(metric).add(web_measure(metric, {"route": "default"}))
        live.window(0.2)
        failed = AnalysisMetric(metric).add(web_measure(metric, {"route": "default"}))
    assert (undecided, passed, failed) == (INCONCLUSIVE, SUCCESSFUL, FAILED)  # Inconclusive: the rollout pauses for a person


# ------------------------------------------------------------------ Argo Rollouts: the prometheus provider


def _scrape(live: Live) -> str:
    with urllib.request.urlopen(live.url + "/qc/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def test_argo_prometheus_template_reads_qc_canary_guardrail_passed_by_route(tmp_path: Path) -> None:
    guardrails = {
        "min_acceptance_rate": 0.55,
        "max_error_rate": "50%",
        "fallback_action": "disable_speculative_decoding_for_route",
    }
    args = {"route": "chat", "namespace": "llm"}
    target = {"namespace": "llm", "job": "qc-canary"}  # what the scrape adds to every series
    with live_watcher(tmp_path / "out", routes=["chat", "billing"], guardrails=guardrails) as live:
        before = prometheus_measure(PROM, args, _scrape(live), target)
        live.window(0.8)
        passing = prometheus_measure(PROM, args, _scrape(live), target)
        live.window(0.2)
        failing = prometheus_measure(PROM, args, _scrape(live), target)
        live.window(0.8, drafts=3)
        thin = prometheus_measure(PROM, args, _scrape(live), target)
        elsewhere = prometheus_measure(PROM, {**args, "namespace": "other"}, _scrape(live), target)
    assert before.phase == INCONCLUSIVE and before.value == "[]"  # no series yet: len(result) > 0 keeps it from passing
    assert passing.phase == SUCCESSFUL and json.loads(passing.value) == [1.0, 1.0]  # acceptance and the error rate
    assert failing.phase == FAILED and sorted(json.loads(failing.value)) == [0.0, 1.0]
    assert thin.phase == INCONCLUSIVE and sorted(json.loads(thin.value)) == [-1.0, 1.0]
    assert elsewhere.phase == INCONCLUSIVE


def test_argo_prometheus_template_sees_an_unwatched_guardrail_as_not_evaluated(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", guardrails=WITH_QUALITY) as live:
        live.window(0.8)
        m = prometheus_measure(PROM, {"route": "default", "namespace": "llm"}, _scrape(live), {"namespace": "llm"})
    assert m.phase == INCONCLUSIVE and sorted(json.loads(m.value)) == [-1.0, 1.0]
