"""Flagger calling the watcher's webhooks (`/qc/flagger/<type>`) as its `callWebhook` does (`controllers.py`), with the
webhooks of docs/examples/canary/flagger.yaml, against a served watcher; and what Flagger then does with each answer.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from qualitycheck.canary._flagger import HOOKS
from tests.unit.canary.canary_helpers import ROOT, Live, example_docs, live_watcher, status_of
from tests.unit.canary.controllers import FLAGGER_ON, flagger_call, flagger_does

FLAGGER_CRD = ROOT / "tests" / "fixtures" / "controllers" / "flagger" / "canaries.flagger.app.yaml"


def _payload(route: str | None = "default", name: str = "llm") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "llm",
        "phase": "Progressing",
        "checksum": "85d557f47b",
        "metadata": {"route": route} if route is not None else {},
    }


def _asked(live: Live, hooks: tuple[str, ...] = HOOKS, **payload: Any) -> dict[str, str]:
    return {h: flagger_does(h, f"{live.url}/qc/flagger/{h}", _payload(**payload)) for h in hooks}


def test_every_webhook_type_of_flaggers_crd_has_an_answer() -> None:
    crd = yaml.safe_load(FLAGGER_CRD.read_text())
    (version,) = crd["spec"]["versions"]
    webhook = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["analysis"]["properties"]["webhooks"]
    assert set(webhook["items"]["properties"]["type"]["enum"]) - {""} == set(HOOKS) == set(FLAGGER_ON)


def test_flagger_on_a_passing_window_promotes_and_never_rolls_back(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        live.window(0.8)
        done = _asked(live)
    assert done == {
        "confirm-rollout": "proceed",
        "pre-rollout": "proceed",
        "rollout": "proceed",
        "confirm-traffic-increase": "increase weight",
        "confirm-promotion": "promote",
        "post-rollout": "done",
        "rollback": "carry on",
        "event": "done",
    }


def test_flagger_on_a_failing_window_counts_a_failed_check_holds_and_waits(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", trip_after=3) as live:
        live.window(0.2)
        done = _asked(live)
    assert done["rollout"] == "failed check" and done["confirm-traffic-increase"] == "hold weight"
    assert done["confirm-promotion"] == "wait" and done["rollback"] == "carry on"  # not tripped yet
    assert done["confirm-rollout"] == "proceed" and done["pre-rollout"] == "proceed"


def test_flagger_on_a_window_without_evidence_waits_to_promote_but_counts_no_failure(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        before = _asked(live, ("rollout", "confirm-promotion"))
        live.window(0.8, drafts=3)
        thin = _asked(live, ("rollout", "confirm-traffic-increase", "confirm-promotion"))
        live.clock.advance(live.watcher.stale_after_s + 1)
        stale = _asked(live, ("rollout", "confirm-promotion"))
    assert before == {"rollout": "proceed", "confirm-promotion": "wait"}
    assert thin == {"rollout": "proceed", "confirm-traffic-increase": "increase weight", "confirm-promotion": "wait"}
    assert stale == {"rollout": "proceed", "confirm-promotion": "wait"}


def test_flagger_rollback_is_yes_once_the_route_tripped_and_nothing_else_goes_on(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", trip_after=2) as live:
        live.window(0.2)
        once = _asked(live, ("rollback",))
        live.window(0.2)
        live.window(0.8)  # hysteresis: a passing window after the trip changes nothing
        done = _asked(live)
        refusal = flagger_call(f"{live.url}/qc/flagger/confirm-promotion", _payload())
    assert once == {"rollback": "carry on"}
    assert done["rollback"] == "roll back"
    assert done["confirm-promotion"] == "wait" and done["confirm-rollout"] == "wait" and done["pre-rollout"] == "failed check"
    assert done["rollout"] == "failed check" and done["confirm-traffic-increase"] == "hold weight"
    body = json.loads(refusal or "{}")  # what Flagger writes into the Canary's events
    assert body["ok"] is False and "re-arm it with `qualitycheck canary --rearm default`" in body["reason"]


def test_flagger_threshold_rolls_back_on_the_window_the_dry_run_watcher_trips(tmp_path: Path) -> None:
    (canary,) = [d for d in example_docs("flagger.yaml") if d["kind"] == "Canary"]
    threshold = canary["spec"]["analysis"]["threshold"]
    with live_watcher(tmp_path / "out", dry_run=True, trip_after=threshold) as live:
        failed_checks, seen = 0, []
        for acceptance in (0.8, 0.2, None, 0.2, 0.2):
            live.window(acceptance)
            if flagger_does("rollout", f"{live.url}/qc/flagger/rollout", _payload()) == "failed check":
                failed_checks += 1
            seen.append((failed_checks >= threshold, status_of(live)["routes"]["default"]["state"]))
    assert seen == [(False, "armed")] * 4 + [(True, "tripped")]  # Flagger rolls back (scheduler.go: failedChecks >= threshold)


def test_flagger_route_comes_from_metadata_else_the_canary_name(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out", routes=["chat", "billing"], routes_overrides={"billing": {"min_acceptance_rate": 0.9}}) as live:
        live.window(0.8)
        by_metadata = _asked(live, ("confirm-promotion",), route="billing", name="llm")
        by_name = _asked(live, ("confirm-promotion",), route=None, name="chat")
        unknown = flagger_call(f"{live.url}/qc/flagger/confirm-promotion", _payload(route=None, name="llm"))
        unknown_rollback = _asked(live, ("rollback",), route="nope")
    assert by_metadata == {"confirm-promotion": "wait"} and by_name == {"confirm-promotion": "promote"}
    assert unknown is not None and "route 'llm' is not watched (watched: billing, chat)" in json.loads(unknown)["reason"]
    assert unknown_rollback == {"rollback": "carry on"}


def test_flagger_event_and_post_rollout_are_acknowledged_and_logged(tmp_path: Path) -> None:
    event = {**_payload(), "metadata": {"eventMessage": "Advance llm.llm canary weight 10", "eventType": "Normal", "timestamp": "1"}}
    with live_watcher(tmp_path / "out") as live:
        assert flagger_call(f"{live.url}/qc/flagger/event", event) is None
        assert flagger_call(f"{live.url}/qc/flagger/post-rollout", {**_payload(), "phase": "Succeeded"}) is None
    assert "qualitycheck canary: flagger event: llm.llm Progressing: Advance llm.llm canary weight 10" in live.logs
    assert "qualitycheck canary: flagger post-rollout: llm.llm Succeeded" in live.logs


def test_flagger_bad_payload_and_unknown_type_are_refused_with_the_reason(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        req = urllib.request.Request(f"{live.url}/qc/flagger/rollout", data=b"not json", method="POST")
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(req, timeout=10)
        typo = flagger_call(f"{live.url}/qc/flagger/confirm-promote", _payload())
    assert bad.value.code == 400 and "not a Flagger webhook payload" in json.loads(bad.value.read())["reason"]
    assert typo is not None and "no Flagger webhook type 'confirm-promote'" in json.loads(typo)["reason"]


def test_flagger_without_an_answer_waits_to_promote_never_rolls_back_and_counts_a_failed_check(tmp_path: Path) -> None:
    with live_watcher(tmp_path / "out") as live:
        url = live.url
    gone = {h: flagger_does(h, f"{url}/qc/flagger/{h}", _payload(), retries=2) for h in ("confirm-promotion", "rollback", "rollout")}
    assert gone == {"confirm-promotion": "wait", "rollback": "carry on", "rollout": "failed check"}
