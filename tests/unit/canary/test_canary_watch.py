"""The canary's trip logic on scripted metrics: decay, noise, restarts, outages, hysteresis, actions.

Time is a fake clock moved by hand; each step scrapes the scripted pages and
evaluates the window that ends there.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from qualitycheck.canary._actions import ActionRunner
from qualitycheck.canary._record import CanaryRecord
from qualitycheck.canary._watch import EXIT_HEALTHY, EXIT_NOT_EVALUATED, EXIT_TRIPPED, Watcher, exit_code
from qualitycheck.testserver import TestServer
from tests.helpers import raw_server
from tests.unit.canary.canary_helpers import Clock, Page, actions, config, recorder, records, scripted_page, vllm_page, watcher

STEP = 10.0


def _window(w: Watcher, clock: Clock) -> CanaryRecord:
    clock.advance(STEP)
    return asyncio.run(w.step())


def _speculate(srv: TestServer, drafts: int, acceptance: float, k: int = 3) -> None:
    """Script the candidate's counters: `drafts` more drafts of k tokens, `acceptance` of them accepted."""
    c = srv.counters
    c["drafts"] += drafts
    c["draft_tokens"] += drafts * k
    c["accepted"] += round(drafts * k * acceptance)
    c["generation_tokens"] += drafts * (1 + k * acceptance)
    c["requests"] += 5


def test_acceptance_decaying_over_time_trips_after_consecutive_windows_and_acts_once_per_route(tmp_path: Path) -> None:
    cmd, log = recorder(tmp_path)
    clock = Clock()
    with TestServer(speculative={"k": 3, "acceptance": 0.8}) as srv:
        cfg = config(candidate_metrics=srv.url + "/metrics", routes=["chat", "billing"], window=f"{STEP}s", trip_after=2)
        w = watcher(cfg, tmp_path / "out", clock, cmd)
        asyncio.run(w.scrape())
        seen = []
        for acceptance in (0.8, 0.7, 0.5, 0.4, 0.3, 0.25):  # the drafter decays over hours
            _speculate(srv, 100, acceptance)
            rec = _window(w, clock)
            seen.append((rec.status, rec.tripped_now))
    rates = [r["acceptance"]["rate"] for r in records(tmp_path / "out")]
    assert [round(x, 2) for x in rates] == [0.8, 0.7, 0.5, 0.4, 0.3, 0.25]
    assert seen[:2] == [("healthy", []), ("healthy", [])]
    assert seen[2] == ("failing", [])  # one failing window is not a trip
    assert seen[3] == ("tripped", ["billing", "chat"]) or seen[3] == ("tripped", ["chat", "billing"])
    assert seen[4][1] == [] and seen[5][1] == []  # hysteresis: tripped once, no second trip
    ran = actions(log)
    assert sorted(a["env"]["QC_ROUTE"] for a in ran) == ["billing", "chat"]  # once per route, never again
    first = ran[0]
    assert first["env"]["QC_ACTION"] == "disable_speculative_decoding_for_route"
    assert first["env"]["QC_GUARDRAIL"] == "min_acceptance_rate"
    assert float(first["env"]["QC_OBSERVED"]) == first["event"]["observed"] < 0.55
    assert float(first["env"]["QC_THRESHOLD"]) == 0.55
    assert first["event"]["route"] == first["env"]["QC_ROUTE"] and first["event"]["consecutive_windows"] == 2


def test_one_noisy_window_does_not_trip(tmp_path: Path) -> None:
    cmd, log = recorder(tmp_path)
    clock = Clock()
    with TestServer(speculative={"k": 3}) as srv:
        w = watcher(config(candidate_metrics=srv.url + "/metrics", window=f"{STEP}s", trip_after=2), tmp_path / "out", clock, cmd)
        asyncio.run(w.scrape())
        statuses = []
        streaks = []
        for acceptance in (0.8, 0.3, 0.8, 0.3, 0.8):  # noisy, never twice in a row
            _speculate(srv, 100, acceptance)
            rec = _window(w, clock)
            statuses.append(rec.status)
            streaks.append(rec.guardrails[0].streak)
    assert statuses == ["healthy", "failing", "healthy", "failing", "healthy"]
    assert streaks == [0, 1, 0, 1, 0]
    assert actions(log) == []


def test_counters_resetting_on_a_server_restart_count_from_the_reset(tmp_path: Path) -> None:
    clock = Clock()
    page = Page(vllm_page(drafts=10_000, draft_tokens=30_000, accepted=24_000, requests=500))
    with scripted_page(page) as url:
        w = watcher(config(candidate_metrics=url + "/metrics", window=f"{STEP}s", trip_after=1), tmp_path / "out", clock)
        asyncio.run(w.scrape())
        page.text = vllm_page(drafts=60, draft_tokens=180, accepted=126, requests=10)  # restarted, then 60 drafts at 0.7
        rec = _window(w, clock)
    g = rec.guardrails[0]
    assert g.result.passed is True and g.result.observed == 0.7
    assert rec.acceptance["drafts"] == 60
    assert rec.sources[0].counter_resets == 1
    assert any("reset" in a for a in rec.alerts)
    assert rec.status == "healthy"  # never a negative delta read as a collapse of acceptance


def test_a_metrics_endpoint_down_is_not_evaluated_and_alerts_never_a_pass(tmp_path: Path) -> None:
    clock = Clock()
    page = Page(vllm_page())
    with scripted_page(page) as url:
        w = watcher(config(candidate_metrics=url + "/metrics", window=f"{STEP}s", trip_after=2), tmp_path / "out", clock)
        asyncio.run(w.scrape())
        page.text = vllm_page(drafts=100, draft_tokens=300, accepted=90, requests=20)  # 0.3: failing
        first = _window(w, clock)
        page.status = 503
        down = _window(w, clock)
        page.status = 200
        page.text = vllm_page(drafts=200, draft_tokens=600, accepted=180, requests=40)
        after = _window(w, clock)
    assert first.guardrails[0].result.passed is False and first.guardrails[0].streak == 1
    g = down.guardrails[0]
    assert g.result.passed is None and g.result.observed is None
    assert "metrics endpoint down" in g.result.message and "503" in g.result.message
    assert down.status == "not_evaluated" and exit_code(down) == EXIT_NOT_EVALUATED
    assert any("candidate metrics unavailable" in a for a in down.alerts)
    assert down.sources[0].ok is False
    assert g.streak == 1  # the outage neither resets nor extends the failing streak
    assert after.status == "tripped" and after.guardrails[0].streak == 2


def test_a_window_with_too_few_drafts_is_not_evaluated(tmp_path: Path) -> None:
    clock = Clock()
    page = Page(vllm_page())
    with scripted_page(page) as url:
        w = watcher(config(candidate_metrics=url + "/metrics", window=f"{STEP}s"), tmp_path / "out", clock)
        asyncio.run(w.scrape())
        page.text = vllm_page(drafts=3, draft_tokens=9, accepted=0, requests=1)  # 0% acceptance, but on 3 drafts
        rec = _window(w, clock)
    g = rec.guardrails[0]
    assert g.result.passed is None and "3 drafts in the window (minimum 10)" in g.result.message
    assert g.evidence["drafts"] == 3
    assert exit_code(rec) == EXIT_NOT_EVALUATED


def test_hysteresis_holds_a_tripped_route_until_rearmed_from_another_process_then_trips_and_acts_again(tmp_path: Path) -> None:
    cmd, log = recorder(tmp_path)
    clock = Clock()
    out = tmp_path / "out"
    page = Page(vllm_page())
    n = {"drafts": 0.0, "tokens": 0.0, "accepted": 0.0, "requests": 0.0}

    def advance(acceptance: float) -> None:
        n["drafts"] += 100
        n["tokens"] += 300
        n["accepted"] += 300 * acceptance
        n["requests"] += 10
        page.text = vllm_page(drafts=n["drafts"], draft_tokens=n["tokens"], accepted=n["accepted"], requests=n["requests"])

    with scripted_page(page) as url:
        cfg = config(candidate_metrics=url + "/metrics", window=f"{STEP}s", trip_after=1)
        w = watcher(cfg, out, clock, cmd)
        asyncio.run(w.scrape())
        advance(0.2)
        tripped = _window(w, clock)
        advance(0.9)
        held = _window(w, clock)
        proc = subprocess.run(
            [sys.executable, "-m", "qualitycheck", "canary", "--rearm", "default", "--out", str(out)], capture_output=True, text=True
        )
        advance(0.9)
        healthy = _window(w, clock)
        advance(0.2)
        again = _window(w, clock)
    assert tripped.tripped_now == ["default"] and tripped.status == "tripped"
    assert held.status == "tripped" and held.guardrails[0].result.passed is True  # a good window does not re-arm
    assert exit_code(held) == EXIT_TRIPPED
    assert proc.returncode == 0 and "re-armed (was tripped by min_acceptance_rate)" in proc.stdout
    assert healthy.status == "healthy" and exit_code(healthy) == EXIT_HEALTHY
    assert again.tripped_now == ["default"]
    assert [a["env"]["QC_ROUTE"] for a in actions(log)] == ["default", "default"]  # once per trip, again after the re-arm
    kinds = [r["kind"] for r in records(out)]
    assert kinds == ["window", "window", "rearm", "window", "window"]


def test_a_failing_action_is_retried_every_window_reported_and_never_forgotten(tmp_path: Path) -> None:
    fail_cmd, log = recorder(tmp_path, exit_status=7)
    clock = Clock()
    out = tmp_path / "out"
    page = Page(vllm_page())
    with scripted_page(page) as url:
        cfg = config(candidate_metrics=url + "/metrics", window=f"{STEP}s", trip_after=1)
        w = watcher(cfg, out, clock, fail_cmd)
        asyncio.run(w.scrape())
        page.text = vllm_page(drafts=100, draft_tokens=300, accepted=30, requests=10)
        first = _window(w, clock)
        page.text = vllm_page(drafts=200, draft_tokens=600, accepted=60, requests=20)
        second = _window(w, clock)
        (tmp_path / "ok").mkdir()
        ok_cmd, ok_log = recorder(tmp_path / "ok")
        w2 = watcher(cfg, out, clock, ok_cmd)  # a new process picks the pending action up
        asyncio.run(w2.scrape())
        page.text = vllm_page(drafts=300, draft_tokens=900, accepted=90, requests=30)
        third = _window(w2, clock)
        page.text = vllm_page(drafts=400, draft_tokens=1200, accepted=120, requests=40)
        fourth = _window(w2, clock)
    assert first.actions[0].status == "pending" and "exited with status 7" in (first.actions[0].error or "")
    assert any("FAILED" in a for a in first.alerts)
    assert second.actions[0].status == "pending" and second.actions[0].attempts == 2
    assert len(actions(log)) == 2
    assert third.actions[0].status == "done" and third.actions[0].attempts == 3
    assert [a["env"]["QC_ROUTE"] for a in actions(ok_log)] == ["default"]
    assert fourth.actions == []  # done: never run again for this trip
    state = json.loads((out / "canary_state.json").read_text())
    assert state["actions"]["default"]["status"] == "done"


def test_webhook_posts_the_event_with_retries(tmp_path: Path) -> None:
    got: list[dict[str, object]] = []
    answers = [503, 502, 204]

    async def hook(request: web.Request) -> web.Response:
        got.append(await request.json())
        return web.Response(status=answers.pop(0))

    with raw_server(hook) as hook_url:
        runner = ActionRunner(webhook=hook_url + "/fallback", retries=3, backoff_s=0.0)
        attempts, error = asyncio.run(runner.run({"route": "chat", "action": "disable", "guardrail": "min_acceptance_rate"}))
    assert error is None and attempts == 3
    assert len(got) == 3 and got[0] == {"route": "chat", "action": "disable", "guardrail": "min_acceptance_rate"}


def test_webhook_that_keeps_failing_is_reported(tmp_path: Path) -> None:
    async def hook(request: web.Request) -> web.Response:
        return web.Response(status=500, text="broken")

    with raw_server(hook) as hook_url:
        attempts, error = asyncio.run(ActionRunner(webhook=hook_url, retries=2, backoff_s=0.0).run({"route": "r"}))
    assert attempts == 3 and error is not None and "HTTP 500" in error


def test_dry_run_only_records_the_decision(tmp_path: Path) -> None:
    cmd, log = recorder(tmp_path)
    clock = Clock()
    out = tmp_path / "out"
    page = Page(vllm_page())
    with scripted_page(page) as url:
        w = watcher(config(candidate_metrics=url + "/metrics", window=f"{STEP}s", trip_after=1), out, clock, cmd, dry_run=True)
        asyncio.run(w.scrape())
        page.text = vllm_page(drafts=100, draft_tokens=300, accepted=30, requests=10)
        rec = _window(w, clock)
    assert rec.tripped_now == ["default"] and rec.dry_run
    assert rec.actions[0].status == "recorded" and rec.actions[0].event["guardrail"] == "min_acceptance_rate"
    assert actions(log) == []
    assert not (out / "canary_state.json").exists()  # a dry run's decisions never pass for actions taken
    assert (out / "canary_state.dry-run.json").exists()


def test_tpot_p95_from_histogram_deltas_candidate_against_baseline(tmp_path: Path) -> None:
    clock = Clock()
    inf = float("inf")
    cand, base = Page(vllm_page(tpot={0.01: 0, 0.02: 0, 0.05: 0, inf: 0})), Page(vllm_page(tpot={0.01: 0, 0.02: 0, 0.05: 0, inf: 0}))
    with scripted_page(cand) as cu, scripted_page(base) as bu:
        cfg = config(
            candidate_metrics=cu + "/metrics",
            baseline_metrics=bu + "/metrics",
            window=f"{STEP}s",
            guardrails={"max_tpot_p95_regression": "10%"},
        )
        w = watcher(cfg, tmp_path / "out", clock)
        asyncio.run(w.scrape())
        base.text = vllm_page(requests=20, tpot={0.01: 20, 0.02: 20, 0.05: 20, inf: 20})  # p95 in (0, 10 ms]
        cand.text = vllm_page(requests=20, tpot={0.01: 0, 0.02: 20, 0.05: 20, inf: 20})  # p95 in (10, 20 ms]
        rec = _window(w, clock)
    g = next(g for g in rec.guardrails if g.result.name == "max_tpot_p95_regression")
    assert g.result.passed is False
    assert g.result.observed == round(0.0195 / 0.0095 - 1, 6)  # histogram_quantile's interpolation on both sides
    assert g.evidence == {"candidate_requests": 20, "baseline_requests": 20}
    assert rec.unwatched == []


def test_error_rate_from_the_shadow_proxy_counters(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    mirrored = Counter("qc_shadow_mirrored", "requests mirrored to the candidate", registry=reg)
    failed = Counter("qc_shadow_candidate_errors", "mirrored requests the candidate failed", registry=reg)
    clock = Clock()
    page = Page(generate_latest(reg).decode())
    with scripted_page(page) as url:
        cfg = config(shadow_metrics=url + "/qc/metrics", window=f"{STEP}s", guardrails={"max_error_rate": "1%"}, trip_after=1)
        w = watcher(cfg, tmp_path / "out", clock)
        asyncio.run(w.scrape())
        mirrored.inc(200)
        failed.inc(6)
        page.text = generate_latest(reg).decode()  # exactly what prometheus_client writes
        rec = _window(w, clock)
    g = next(g for g in rec.guardrails if g.result.name == "max_error_rate")
    assert g.result.passed is False and g.result.observed == 0.03
    assert g.evidence == {"requests": 200, "errors": 6}
    assert rec.tripped_now == ["default"]


def test_error_rate_from_the_servers_own_counters(tmp_path: Path) -> None:
    clock = Clock()
    page = Page(vllm_page())
    with scripted_page(page) as url:
        cfg = config(candidate_metrics=url + "/metrics", window=f"{STEP}s", guardrails={"max_error_rate": "5%"})
        w = watcher(cfg, tmp_path / "out", clock)
        asyncio.run(w.scrape())
        page.text = vllm_page(requests=100, errors=2)
        rec = _window(w, clock)
    g = next(g for g in rec.guardrails if g.result.name == "max_error_rate")
    assert g.result.passed is True and g.result.observed == 0.02


def test_gpu_facts_are_recorded_beside_the_guardrails(tmp_path: Path) -> None:
    from tests.unit.canary.canary_helpers import FIXTURES

    clock = Clock()
    cand, dcgm = Page(vllm_page(kv=0.4)), Page((FIXTURES / "dcgm_metrics.txt").read_text())
    with scripted_page(cand) as cu, scripted_page(dcgm) as du:
        w = watcher(config(candidate_metrics=cu + "/metrics", dcgm_metrics=du + "/metrics", window=f"{STEP}s"), tmp_path / "out", clock)
        asyncio.run(w.scrape())
        cand.text = vllm_page(kv=0.6, drafts=100, draft_tokens=300, accepted=270, requests=10)
        rec = _window(w, clock)
    facts = rec.gpu["candidate"]
    assert facts.kv_cache_usage == 0.6
    assert facts.gpu_utilization == 70.0 and facts.gpu_memory_used_mib == 39000.0 and facts.gpu_memory_free_mib == 5000.0
    assert rec.status == "healthy"


def test_quality_from_a_live_run_folder_counts_the_pairs_stored_in_the_window(tmp_path: Path) -> None:
    import time

    from qualitycheck.cli._main import main
    from tests.helpers import qa_cases, write_suite

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6, checks={"exact": True}))
    with TestServer(default="same") as b, TestServer(default="same", answers={"qa 2?": "changed", "qa 3?": "other"}) as c:
        args = ["run", "--baseline", b.url, "--candidate", c.url, "--model", "m", "--suite", str(suite), "--no-preflight"]
        assert main([*args, "--out", str(tmp_path / "run"), "--no-noise-floor"]) == 1
    cfg = config(
        window="1h",
        guardrails={"max_quality_regression_cases": 0},
        evidence={"min_pairs": 5},
        routes=["qa"],
        run={"noise_floor": "none"},
    )
    now = Clock(time.time() + 1)
    rec = asyncio.run(watcher(cfg, tmp_path / "out", now, run_dir=tmp_path / "run").step())
    (g,) = rec.guardrails
    assert g.result.route == "qa" and g.result.passed is False and g.result.observed == 2
    assert "qa-2 (exact)" in g.result.message and "qa-3 (exact)" in g.result.message
    assert g.evidence == {"pairs": 6}
    before = Clock(now.t - 7200)  # a window that ended before anything was stored
    rec = asyncio.run(watcher(cfg, tmp_path / "out2", before, run_dir=tmp_path / "run").step())
    assert rec.guardrails[0].result.passed is None and "0 pairs stored in the window (minimum 5)" in rec.guardrails[0].result.message


def test_a_stop_while_a_source_hangs_ends_the_watch_at_once_without_a_window(tmp_path: Path) -> None:
    """SIGTERM (the stop event) must not wait out a hung scrape's timeouts and retries."""
    text = vllm_page()
    stop_at_hit = 2  # the first scrape answers; the second hangs, and the stop arrives while it does

    async def main() -> tuple[CanaryRecord | None, int]:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        hits = 0

        async def handler(request: web.Request) -> web.Response:
            nonlocal hits
            hits += 1
            if hits >= stop_at_hit:
                loop.call_soon_threadsafe(stop.set)
                await asyncio.sleep(3600)  # never answers within the scrape's timeouts and retries
            return web.Response(text=text, content_type="text/plain")

        with raw_server(handler) as url:
            w = watcher(config(candidate_metrics=url + "/metrics", interval="1s", window=f"{STEP}s"), tmp_path / "out", Clock())
            # the guard is far below one hung scrape's budget (three tries of 10 s): only a prompt stop meets it
            last = await asyncio.wait_for(w.watch(stop=stop), 20)
        return last, hits

    last, hits = asyncio.run(main())
    assert last is None and hits == stop_at_hit
    assert not (tmp_path / "out" / "canary.jsonl").exists()  # no window was evaluated from half a scrape


def test_a_scrape_slower_than_the_interval_is_an_alert_on_the_next_window(tmp_path: Path) -> None:
    text = vllm_page()
    slow = {"on": False}

    async def handler(request: web.Request) -> web.Response:
        if slow["on"]:
            await asyncio.sleep(3.2)  # the interval below is 3s
        return web.Response(text=text, content_type="text/plain")

    clock = Clock()
    with raw_server(handler) as url:
        w = watcher(config(candidate_metrics=url + "/metrics", interval="3s", window=f"{STEP}s"), tmp_path / "out", clock)
        asyncio.run(w.scrape())
        quick = _window(w, clock)
        slow["on"] = True
        late = _window(w, clock)
    assert not any("took" in a for a in quick.alerts)
    assert any(a.startswith("scraping candidate took ") and "interval of 3s" in a for a in late.alerts), late.alerts


def test_a_window_tolerates_the_regression_the_offline_gate_tolerates(tmp_path: Path) -> None:
    """The window's quality guardrail is the offline gate's decision on the window's pairs, floor and allowances included.

    One regression among cases the baseline was asked again for, five of which disagreed with themselves:
    the offline gate tolerates it (the measured noise explains it), so the window must pass it too, with
    the same words, not leave the route undecided for want of the floor's support.
    """
    from qualitycheck.pipeline._run import summarize
    from tests.unit.verdict.decision_scenarios import floor_explains

    store, run_cfg = floor_explains(tmp_path / "run")
    with store:
        offline = next(g for g in summarize(store, run_cfg).guardrails if g.route == "qa" and g.name == "max_quality_regression_cases")
    assert offline.passed is True and "1 regression case(s) tolerated" in offline.message
    cfg = config(window="1h", guardrails={"max_quality_regression_cases": 0}, evidence={"min_pairs": 5}, routes=["qa"])
    rec = asyncio.run(watcher(cfg, tmp_path / "out", Clock(100.0), run_dir=tmp_path / "run").step())  # the stored pairs started at 0
    (g,) = rec.guardrails
    assert g.evidence == {"pairs": 30}
    assert (g.result.passed, g.result.observed, g.result.message) == (offline.passed, offline.observed, offline.message)
