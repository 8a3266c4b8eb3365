"""The watcher's decision as rollout controllers read it: `/qc/status` and `/qc/ready`, from a served watcher.

Every window is decided by a watcher serving on loopback over a scripted
vLLM page and a fake clock (`canary_helpers.live_watcher`); the endpoints are
asked over HTTP, and each answer checked against the published schema.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from qualitycheck.canary._serve import CanaryMetrics, serve
from qualitycheck.canary._state import locked_state
from qualitycheck.cli._main import main
from qualitycheck.core._errors import ConfigError
from tests.unit.canary.canary_helpers import STATUS_SCHEMA, WITH_QUALITY, get_json, live_watcher, status_of


def test_status_shape_per_route_guardrails_and_window(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", routes=["chat", "billing"], interval="10s") as live:
        live.window(0.8)
        s = status_of(live)
    assert s["format_version"] == 1 and s["ready"] is True and s["status"] == "healthy"
    assert s["window"]["end"] - s["window"]["start"] == 10.0 and s["window"]["interval_s"] == 10.0
    assert s["window"]["stale"] is False and s["window"]["decided"] == 1
    assert set(s["routes"]) == {"chat", "billing"}
    chat = s["routes"]["chat"]
    assert chat["state"] == "armed" and chat["passed"] is True and chat["reason"] == "every guardrail passed with enough evidence"
    (g,) = chat["guardrails"]
    assert g["name"] == "min_acceptance_rate" and g["passed"] is True
    assert g["observed"] == pytest.approx(0.8) and g["threshold"] == 0.55
    assert g["evidence"] == {"drafts": 100.0, "draft_tokens": 300.0} and g["failing_windows"] == 0
    assert g["source"].endswith("/metrics") and g["message"]


def test_status_before_the_first_window_answers_200_with_every_route_undecided(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        s = status_of(live)
    assert s["ready"] is False and s["status"] is None and s["window"]["end"] is None
    route = s["routes"]["default"]
    assert route["passed"] is None and route["reason"] == "no window decided yet"
    assert [(g["name"], g["passed"]) for g in route["guardrails"]] == [("min_acceptance_rate", None)]


def test_ready_is_503_until_a_first_window_is_decided(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        before = get_json(live.url + "/qc/ready")
        live.window(None)  # even a window without evidence is a decided window
        after = get_json(live.url + "/qc/ready")
    assert before == (503, {"status": "waiting for the first window", "interval_s": 30.0})
    assert after == (200, {"status": "ready", "windows": 1})


def test_a_route_tripped_before_a_restart_is_tripped_before_the_first_window(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", trip_after=1) as live:
        live.window(0.2)
    with live_watcher(tmp_path / "out", trip_after=1) as live:
        route = status_of(live)["routes"]["default"]
    assert route["state"] == "tripped" and route["tripped_by"] == "min_acceptance_rate" and route["passed"] is None


def test_status_never_waits_for_the_state_lock(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", trip_after=1) as live:
        live.window(0.2)
    with live_watcher(tmp_path / "out", trip_after=1) as live, locked_state(tmp_path / "out"):  # a window, or a re-arm, holds it
        code, body = get_json(live.url + "/qc/status")
    assert code == 200 and body["routes"]["default"]["state"] == "tripped"


def test_a_window_older_than_three_intervals_and_a_scrape_is_stale_and_answers_nothing(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", interval="10s") as live:
        live.window(0.8)
        fresh = status_of(live)
        live.clock.advance(fresh["window"]["stale_after_s"] - 1)
        late = status_of(live)
        live.clock.advance(2)  # the loop stopped deciding windows
        stale = status_of(live)
    assert fresh["window"]["stale_after_s"] == pytest.approx(3 * 10 + 30.6)
    assert late["window"]["stale"] is False and late["routes"]["default"]["passed"] is True
    assert stale["window"]["stale"] is True and stale["routes"]["default"]["passed"] is None
    assert "stopped deciding windows" in stale["routes"]["default"]["reason"]
    assert stale["routes"]["default"]["guardrails"][0]["passed"] is True  # the last window's results stay readable


def test_an_unwatched_guardrail_leaves_the_route_undecided_and_is_minus_one_on_metrics(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", guardrails=WITH_QUALITY) as live:
        live.window(0.8)
        route = status_of(live)["routes"]["default"]
        page = urllib.request.urlopen(live.url + "/qc/metrics", timeout=10).read().decode()
    by_name = {g["name"]: g for g in route["guardrails"]}
    assert by_name["min_acceptance_rate"]["passed"] is True
    quality = by_name["max_quality_regression_cases"]
    assert quality["passed"] is None and "give --run DIR" in quality["message"] and quality["threshold"] == 0
    assert route["passed"] is None  # never promoted past a guardrail nobody reads
    assert 'qc_canary_guardrail_passed{guardrail="max_quality_regression_cases",route="default"} -1.0' in page
    assert 'qc_canary_guardrail_passed{guardrail="min_acceptance_rate",route="default"} 1.0' in page


def test_a_routes_own_threshold_is_listed_beside_the_endpoints(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", routes=["chat", "billing"], routes_overrides={"billing": {"min_acceptance_rate": 0.9}}) as live:
        live.window(0.8)
        s = status_of(live)
    billing = [(g["name"], g["threshold"], g["passed"]) for g in s["routes"]["billing"]["guardrails"]]
    assert billing == [("min_acceptance_rate", 0.55, True), ("min_acceptance_rate", 0.9, False)]
    assert s["routes"]["billing"]["passed"] is False and s["routes"]["chat"]["passed"] is True


def test_schema_canary_status_is_published(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "canary-status"]) == 0
    printed = capsys.readouterr().out
    assert printed == STATUS_SCHEMA.read_text(encoding="utf-8"), (
        "run `qualitycheck schema canary-status > docs/schema/canary-status.schema.json`"
    )
    assert json.loads(printed)["title"] == "qualitycheck canary /qc/status"


def test_listen_on_an_address_in_use_is_bad_input(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        taken = f"127.0.0.1:{live.url.rsplit(':', 1)[1]}"
        with pytest.raises(ConfigError) as refused:
            live.run(serve(CanaryMetrics(), live.watcher.status, taken, live.logs.append))
    assert refused.value.exit_code == 2 and f"command line: --listen: cannot listen on {taken}" in str(refused.value)
