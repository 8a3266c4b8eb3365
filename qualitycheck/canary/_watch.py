"""The canary watcher: every interval, the guardrails over the last window; trips with hysteresis; the fallback.

One evaluation (`Watcher.step`):

1. scrape every configured page (or query Prometheus) and turn each
   source's recent scrapes into the window's deltas (`_window`);
2. evaluate the config's guardrails with the offline gate's own rules
   (`verdict._gate.build_rules`), each only when the window holds enough
   evidence (drafts, requests per side, pairs: `canary.evidence`); otherwise
   the gate's "not evaluated" (`passed: None`), never a pass or a fail. A
   source that is down makes its guardrails not evaluated and raises an alert;
3. count consecutive failing windows per route and guardrail in the state
   (`_state`): windows without evidence neither add nor reset. At
   `trip_after` the route trips and stays tripped until `--rearm ROUTE`;
4. run the route's fallback action once (`_actions`), keep it pending and
   retry it every window while it fails, or only record it (`--dry-run`);
5. append the window to `OUT/canary.jsonl` and publish the state on
   `/qc/metrics`; `status()` is the decision as rollout controllers read it
   (`/qc/status`, `_status`).

Endpoint-wide guardrails (acceptance, TPOT, error rate) apply to every
watched route; a route's override applies to that route; quality is per
route (`--run DIR`). The clock is injected so tests drive time themselves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Literal

from qualitycheck.canary._actions import ActionRunner
from qualitycheck.canary._quality import quality_window
from qualitycheck.canary._record import (
    ActionRecord,
    CanaryRecord,
    GpuFacts,
    GuardrailWindow,
    RouteState,
    SourceStatus,
)
from qualitycheck.canary._sources import DEFAULT_PROMQL, LONGEST_REQUEST_S, PromResult, query_prometheus, scrape_page
from qualitycheck.canary._state import CanaryState, locked_state, read_state
from qualitycheck.canary._status import STALE_AFTER_INTERVALS, CanaryStatus, build_status
from qualitycheck.canary._window import History, WindowDelta, histogram_quantile, window_delta
from qualitycheck.core._config_file import Config
from qualitycheck.pipeline._run import verdict_settings
from qualitycheck.serving._acceptance import acceptance_rates
from qualitycheck.verdict._gate import ALL_ROUTES, Evidence, GuardrailResult, Rule, build_rules, quality_thresholds

__all__ = ["CANARY_LOG", "EXIT_HEALTHY", "EXIT_NOT_EVALUATED", "EXIT_TRIPPED", "Watcher", "exit_code", "rearm", "window_line"]

CANARY_LOG = "canary.jsonl"
EXIT_HEALTHY, EXIT_TRIPPED, EXIT_NOT_EVALUATED = 0, 1, 3

_TPOT_Q = 0.95
_ACCEPTANCE, _TPOT, _ERRORS, _QUALITY = (
    "min_acceptance_rate",
    "max_tpot_p95_regression",
    "max_error_rate",
    "max_quality_regression_cases",
)
_UNWATCHED = {
    _ACCEPTANCE: "no source: give --candidate-metrics or --prometheus",
    _TPOT: "no source: give --candidate-metrics and --baseline-metrics, or canary.promql tpot_p95_candidate and tpot_p95_baseline",
    _ERRORS: "no source: give --shadow-metrics or --candidate-metrics, or canary.promql errors and requests",
    _QUALITY: "no source: give --run DIR (a live shadow or canary run folder)",
}
"""Why a configured guardrail is unwatched, and what would watch it."""


def exit_code(record: CanaryRecord) -> int:
    """`--once`: 1 when a route is tripped, 3 when a watched guardrail lacked evidence (or nothing is watched), else 0."""
    if record.status == "tripped":
        return EXIT_TRIPPED
    if not record.guardrails or any(g.result.passed is None for g in record.guardrails):
        return EXIT_NOT_EVALUATED
    return EXIT_HEALTHY


@dataclasses.dataclass
class _Reading:
    """One guardrail's observation in a window: the gate's evidence, how much of it there was, or why there is none."""

    evidence: Evidence | None = None
    counts: dict[str, float] = dataclasses.field(default_factory=dict)
    missing: str | None = None
    """Why it is not evaluated (source down, too little evidence)."""
    source: str = ""


class Watcher:
    """Evaluates windows into `out` (canary.jsonl, the state, the action records)."""

    def __init__(
        self,
        cfg: Config,
        out: Path,
        *,
        action: ActionRunner | None = None,
        run_dir: Path | None = None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        log: Callable[[str], None] | None = None,
    ):
        self.cfg = cfg
        self.c = cfg.canary
        self.out = out
        self.action = action or ActionRunner(retries=self.c.action_retries)
        self.run_dir = run_dir
        self.dry_run = dry_run
        self.clock = clock
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.guardrails = cfg.guardrails  # validated when the config loaded: a bad value never reaches here
        self.routes = list(self.c.routes) or sorted(cfg.routes) or ["default"]
        self.rules: list[Rule] = [r for r in build_rules(self.guardrails, set(self.routes)) if _route(r) in (ALL_ROUTES, *self.routes)]
        self.pages = {
            name: url
            for name, url in (
                ("candidate", self.c.candidate_metrics),
                ("baseline", self.c.baseline_metrics),
                ("shadow", self.c.shadow_metrics),
                ("dcgm", self.c.dcgm_metrics),
            )
            if url
        }
        self.histories: dict[str, History] = {name: History() for name in self.pages}
        self.prom: dict[str, PromResult] = {}
        self.metrics: Any = None  # the /qc/metrics registry, when served
        self._slow_scrapes: list[str] = []  # alerts for the next window
        self.last: CanaryRecord | None = None
        """The last window decided by this process: what `status()` answers from."""
        self.decided = 0

    # ------------------------------------------------------------ scraping
    @property
    def window_s(self) -> float:
        return self.c.window_s

    async def scrape(self) -> None:
        """One scrape of every page (all at once), or one round of PromQL queries."""
        now = self.clock()
        model = self.cfg.candidate.model if self.cfg.candidate else None
        shadow = (self.c.shadow_names.requests, self.c.shadow_names.errors)
        names = list(self.pages)
        began = time.monotonic()  # the round's pages and PromQL queries together: what delays the window
        snaps = await asyncio.gather(
            *(
                scrape_page(
                    self.pages[n],
                    now,
                    engine="auto" if n == "dcgm" else self.c.engine,
                    model=model if n in ("candidate", "baseline") else None,
                    shadow_names=shadow if n == "shadow" else None,
                )
                for n in names
            )
        )
        for n, snap in zip(names, snaps, strict=True):
            self.histories[n].add(snap, self.window_s)
        if self.c.prometheus:
            exprs = self._promql()
            self.prom = await query_prometheus(self.c.prometheus, exprs, self.window_s) if exprs else {}
            names.append("prometheus")
        took = time.monotonic() - began
        if took > self.c.interval_s:
            self._slow_scrapes.append(
                f"scraping {', '.join(names)} took {took:.1f}s, more than the interval of {self.c.interval}: windows come late"
            )

    def _promql(self) -> dict[str, str]:
        given = self.c.promql.model_dump(exclude_none=True)
        return {**DEFAULT_PROMQL, **given}

    # ------------------------------------------------------------ one window
    async def step(self) -> CanaryRecord:
        await self.scrape()
        return await self.evaluate()

    async def evaluate(self) -> CanaryRecord:
        """Evaluate the window ending now, update the state, act, and append the record."""
        now = self.clock()
        deltas = {n: window_delta(h, now, self.window_s) for n, h in self.histories.items()}
        sources = [
            SourceStatus(name=n, url=self.pages[n], ok=d.ok, error=d.error, engine=d.engine, counter_resets=d.resets)
            for n, d in deltas.items()
        ]
        if self.c.prometheus:
            errs = sorted({r.error for r in self.prom.values() if r.error and "failed" in r.error})
            sources.append(SourceStatus(name="prometheus", url=self.c.prometheus, ok=not errs, error="; ".join(errs) or None))
        alerts = [f"{s.name} metrics unavailable: {s.error}" for s in sources if not s.ok and s.error and "down" in s.error]
        alerts += self._slow_scrapes
        self._slow_scrapes = []
        alerts += [f"prometheus: {s.error}" for s in sources if s.name == "prometheus" and not s.ok]
        alerts += [
            f"{s.name}: counters reset inside the window (server restarted?); counted from the reset" for s in sources if s.counter_resets
        ]

        readings: dict[str, _Reading] = {}
        unwatched: list[str] = []
        for name, read in ((_ACCEPTANCE, self._acceptance), (_TPOT, self._tpot), (_ERRORS, self._errors)):
            if any(r.name == name for r in self.rules):
                reading = read(deltas)
                if reading is None:
                    unwatched.append(name)
                else:
                    readings[name] = reading
        quality: dict[str, _Reading] = {}
        if any(r.name == _QUALITY for r in self.rules):
            if self.run_dir is None:
                unwatched.append(_QUALITY)
            else:  # a large folder takes a while to summarise: /qc/status must answer meanwhile
                quality = await asyncio.to_thread(self._quality, now)

        results: list[tuple[str, GuardrailWindow]] = []
        for rule in self.rules:
            reading = quality.get(_route(rule)) if rule.name == _QUALITY else readings.get(rule.name)
            if reading is None:
                continue
            result = _judge(rule, reading)
            for route in self.routes if _route(rule) == ALL_ROUTES else [_route(rule)]:
                results.append(
                    (
                        route,
                        GuardrailWindow(result=dataclasses.replace(result, route=route), evidence=reading.counts, source=reading.source),
                    )
                )

        acceptance = self._acceptance_figures(deltas)
        gpu = self._gpu(deltas)
        record = await self._decide(now, results, sources, unwatched, acceptance, gpu, alerts)
        self._append(record)
        self.last, self.decided = record, self.decided + 1
        self._publish(record)
        for a in record.alerts:
            self.log(f"qualitycheck canary: ALERT: {a}")
        return record

    # ------------------------------------------------------------ readings
    def _acceptance(self, deltas: dict[str, WindowDelta]) -> _Reading | None:
        ev = self.c.evidence
        if self.c.prometheus and "acceptance_rate" in self._promql():
            p_rate, p_drafts = self.prom.get("acceptance_rate"), self.prom.get("drafts")
            if p_rate is None or p_rate.value is None:
                return _Reading(missing=p_rate.error if p_rate else "not queried yet", source="prometheus")
            pcounts = {"drafts": p_drafts.value} if p_drafts and p_drafts.value is not None else {}
            if "drafts" in self._promql() and pcounts.get("drafts", 0.0) < ev.min_drafts:
                return _Reading(
                    counts=pcounts,
                    missing=f"{pcounts.get('drafts', 0):g} drafts in the window (minimum {ev.min_drafts})",
                    source="prometheus",
                )
            return _Reading(Evidence(acceptance={"rate": p_rate.value}), pcounts, source="prometheus")
        if "candidate" not in deltas:
            return None
        d = deltas["candidate"]
        src = self.pages["candidate"]
        if not d.ok:
            return _Reading(missing=f"candidate {d.error}", source=src)
        if "drafts" in d.counters:
            drafts = d.counters["drafts"]
            counts = {"drafts": drafts, "draft_tokens": d.counters.get("draft_tokens", 0.0)}
            if drafts < ev.min_drafts:
                return _Reading(counts=counts, missing=f"{drafts:g} drafts in the window (minimum {ev.min_drafts})", source=src)
            acc = acceptance_rates(drafts, d.counters.get("draft_tokens", 0.0), d.counters.get("accepted_tokens", 0.0), d.per_position)
            return _Reading(Evidence(acceptance={"rate": acc["rate"]}), counts, source=src)
        if d.engine == "sglang":
            requests = d.counters.get("requests", 0.0)
            counts = {"requests": requests}
            rate = d.gauges.get("spec_accept_rate")
            if rate is None:
                return _Reading(counts=counts, missing="no sglang:spec_accept_rate sample while tokens were generated", source=src)
            if requests < ev.min_requests:
                return _Reading(counts=counts, missing=f"{requests:g} requests in the window (minimum {ev.min_requests})", source=src)
            return _Reading(Evidence(acceptance={"rate": rate}), counts, source=src)
        return _Reading(
            missing="the candidate exposes no speculative-decoding metrics (vllm:spec_decode_*, llamacpp:spec_decode_* or sglang:spec_accept_*)",
            source=src,
        )

    def _tpot(self, deltas: dict[str, WindowDelta]) -> _Reading | None:
        ev = self.c.evidence
        q = self._promql()
        if self.c.prometheus and "tpot_p95_candidate" in q and "tpot_p95_baseline" in q:
            c, b = self.prom.get("tpot_p95_candidate"), self.prom.get("tpot_p95_baseline")
            if c is None or b is None or c.value is None or b.value is None:
                why = next((r.error for r in (c, b) if r is not None and r.error), "not queried yet")
                return _Reading(missing=why, source="prometheus")
            counts: dict[str, float] = {}
            for side, key in (("candidate", "requests"), ("baseline", "baseline_requests")):
                r = self.prom.get(key)
                if key in q and (r is None or r.value is None or r.value < ev.min_requests):
                    n = 0.0 if r is None or r.value is None else r.value
                    return _Reading(
                        counts=counts, missing=f"{side}: {n:g} requests in the window (minimum {ev.min_requests})", source="prometheus"
                    )
                if r is not None and r.value is not None:
                    counts[f"{side}_requests"] = r.value
            return _Reading(_latency(c.value, b.value), counts, source="prometheus")
        if "candidate" not in deltas or "baseline" not in deltas:
            return None
        p95: dict[str, float] = {}
        counts = {}
        for side in ("candidate", "baseline"):
            d = deltas[side]
            if not d.ok:
                return _Reading(counts=counts, missing=f"{side} {d.error}", source=self.pages[side])
            h = d.histograms.get("tpot")
            if h is None:
                return _Reading(counts=counts, missing=f"{side} exposes no TPOT histogram", source=self.pages[side])
            n = d.counters.get("requests", h.count)
            counts[f"{side}_requests"] = n
            if n < ev.min_requests:
                return _Reading(
                    counts=counts, missing=f"{side}: {n:g} requests in the window (minimum {ev.min_requests})", source=self.pages[side]
                )
            value = histogram_quantile(_TPOT_Q, h)
            if value is None:
                return _Reading(counts=counts, missing=f"{side}: TPOT histogram empty in the window", source=self.pages[side])
            p95[side] = value
        return _Reading(
            _latency(p95["candidate"], p95["baseline"]), counts, source=f"{self.pages['candidate']} vs {self.pages['baseline']}"
        )

    def _errors(self, deltas: dict[str, WindowDelta]) -> _Reading | None:
        q = self._promql()
        if self.c.prometheus and "errors" in q and "requests" in q:
            e, r = self.prom.get("errors"), self.prom.get("requests")
            if e is None or r is None or e.value is None or r.value is None:
                why = next((x.error for x in (e, r) if x is not None and x.error), "not queried yet")
                return _Reading(missing=why, source="prometheus")
            return self._error_reading(e.value, r.value, "prometheus")
        for name in ("shadow", "candidate"):
            if name not in deltas:
                continue
            d = deltas[name]
            if not d.ok:
                return _Reading(missing=f"{name} {d.error}", source=self.pages[name])
            if "requests" in d.counters:
                if name == "candidate" and "errors" not in d.counters:  # the shadow proxy's error counters exist from its start
                    return _Reading(missing="the candidate's page counts requests but no failed ones", source=self.pages[name])
                return self._error_reading(d.counters.get("errors", 0.0), d.counters["requests"], self.pages[name])
            if name == "shadow":
                return _Reading(missing=f"shadow proxy exposes no {self.c.shadow_names.requests}", source=self.pages[name])
        return None if not any(n in deltas for n in ("shadow", "candidate")) else _Reading(missing="no request counters on the candidate")

    def _error_reading(self, errors: float, requests: float, source: str) -> _Reading:
        counts = {"requests": requests, "errors": errors}
        if requests < self.c.evidence.min_requests:
            return _Reading(
                counts=counts, missing=f"{requests:g} requests in the window (minimum {self.c.evidence.min_requests})", source=source
            )
        side = {"count": errors, "requests": requests}
        return _Reading(
            Evidence(errors={"candidate": side}, route_errors={r: {"candidate": side} for r in self.routes}),  # type: ignore[dict-item]
            counts,
            source=source,
        )

    def _quality(self, now: float) -> dict[str, _Reading]:
        assert self.run_dir is not None
        qw = quality_window(self.run_dir, verdict_settings(self.cfg), quality_thresholds(self.rules), now - self.window_s, now)
        src = str(self.run_dir)
        out: dict[str, _Reading] = {}
        for route in self.routes:
            pairs = float(qw.pairs.get(route, 0))
            counts = {"pairs": pairs}
            if qw.error is not None:
                out[route] = _Reading(counts=counts, missing=qw.error, source=src)
            elif pairs < self.c.evidence.min_pairs:
                out[route] = _Reading(
                    counts=counts, missing=f"{pairs:g} pairs stored in the window (minimum {self.c.evidence.min_pairs})", source=src
                )
            else:
                out[route] = _Reading(qw.evidence, counts, source=src)
        return out

    def _acceptance_figures(self, deltas: dict[str, WindowDelta]) -> dict[str, float | None]:
        if self.c.prometheus and "acceptance_rate" in self.prom:
            return {"rate": self.prom["acceptance_rate"].value, "drafts": self.prom["drafts"].value if "drafts" in self.prom else None}
        d = deltas.get("candidate")
        if d is None or not d.ok:
            return {}
        if "drafts" in d.counters:
            acc = acceptance_rates(d.counters["drafts"], d.counters.get("draft_tokens", 0.0), d.counters.get("accepted_tokens", 0.0))
            return {k: acc[k] for k in ("rate", "mean_accepted_length", "drafts", "draft_tokens", "accepted_tokens")}
        if "spec_accept_rate" in d.gauges:
            return {"rate": d.gauges["spec_accept_rate"], "mean_accepted_length": d.gauges.get("spec_accept_length")}
        return {}

    def _gpu(self, deltas: dict[str, WindowDelta]) -> dict[str, GpuFacts]:
        out: dict[str, GpuFacts] = {}
        dcgm = deltas.get("dcgm")
        for side in ("candidate", "baseline"):
            d = deltas.get(side)
            facts: dict[str, float | None] = {}
            if d is not None and d.ok:
                facts["kv_cache_usage"] = d.gauges.get("kv_cache_usage")
                for k in ("gpu_utilization", "gpu_memory_used_mib", "gpu_memory_free_mib"):
                    if k in d.gauges:
                        facts[k] = d.gauges[k]
            if side == "candidate":
                if dcgm is not None and dcgm.ok:  # the DCGM exporter of the candidate's node
                    for k in ("gpu_utilization", "gpu_memory_used_mib", "gpu_memory_free_mib"):
                        facts[k] = dcgm.gauges.get(k)
                for k in ("kv_cache_usage", "gpu_utilization", "gpu_memory_used_mib"):
                    r = self.prom.get(k)
                    if r is not None and r.value is not None:
                        facts[k] = r.value
            if any(v is not None for v in facts.values()):
                out[side] = GpuFacts.model_validate({k: v for k, v in facts.items() if v is not None})
        return out

    # ------------------------------------------------------------ trip logic and actions
    async def _decide(
        self,
        now: float,
        results: list[tuple[str, GuardrailWindow]],
        sources: list[SourceStatus],
        unwatched: list[str],
        acceptance: dict[str, float | None],
        gpu: dict[str, GpuFacts],
        alerts: list[str],
    ) -> CanaryRecord:
        tripped_now: list[str] = []
        acted: list[ActionRecord] = []
        with locked_state(self.out, self.dry_run) as state:
            for route, gw in results:
                key = f"{route}/{gw.result.name}"
                if gw.result.passed is True:
                    state.streaks[key] = 0
                elif gw.result.passed is False:
                    state.streaks[key] = state.streaks.get(key, 0) + 1
                gw.streak = state.streaks.get(key, 0)
                rs = state.route(route)
                if gw.result.passed is False and gw.streak >= self.c.trip_after and rs.state == "armed":
                    state.routes[route] = RouteState(route=route, state="tripped", tripped_by=gw.result.name, tripped_at=now)
                    tripped_now.append(route)
                    state.actions[route] = ActionRecord(
                        route=route,
                        action=self.guardrails.fallback_action,
                        status="recorded" if self.dry_run else "pending",
                        event=self._event(route, gw, now),
                    )
            for route in self.routes:
                state.route(route)
            if not self.dry_run:
                for rec in state.pending():
                    acted.append(await self._act(state, rec))
            else:
                acted = [state.actions[r] for r in tripped_now]
            routes = [state.routes[r] for r in self.routes]
            pending = [a for a in state.pending()]
        for route in tripped_now:
            gw = next(g for r, g in results if r == route and g.result.passed is False and g.streak >= self.c.trip_after)
            alerts.append(
                f"route {route} TRIPPED by {gw.result.name} after {gw.streak} failing window(s): {gw.result.message}"
                + (" (dry run: no action taken)" if self.dry_run else "")
            )
        if tripped_now and not self.dry_run and not self.action.configured:
            alerts.append(f"no --on-fail or --webhook configured: {self.guardrails.fallback_action} must be done by hand")
        for a in pending:
            alerts.append(f"fallback action for route {a.route} FAILED (attempt {a.attempts}), will retry: {a.error}")
        gws = [g for _, g in results]
        status: Literal["healthy", "failing", "not_evaluated", "tripped"]
        if any(r.state == "tripped" for r in routes):
            status = "tripped"
        elif any(g.result.passed is False for g in gws):
            status = "failing"
        elif not gws or any(g.result.passed is None for g in gws):
            status = "not_evaluated"
        else:
            status = "healthy"
        return CanaryRecord(
            t=now,
            window_s=self.window_s,
            status=status,
            dry_run=self.dry_run,
            guardrails=gws,
            unwatched=sorted(set(unwatched)),
            sources=sources,
            acceptance=acceptance,
            gpu=gpu,
            routes=routes,
            tripped_now=tripped_now,
            actions=acted,
            alerts=alerts,
        )

    def _event(self, route: str, gw: GuardrailWindow, now: float) -> dict[str, Any]:
        r = gw.result
        return {
            "route": route,
            "action": self.guardrails.fallback_action,
            "guardrail": r.name,
            "observed": r.observed,
            "threshold": r.threshold,
            "message": r.message,
            "consecutive_windows": gw.streak,
            "window_s": self.window_s,
            "t": now,
            "out": str(self.out),
        }

    async def _act(self, state: CanaryState, rec: ActionRecord) -> ActionRecord:
        if not self.action.configured:
            done = rec.model_copy(update={"status": "recorded", "error": "no action configured"})
        else:
            attempts, error = await self.action.run(rec.event)
            done = rec.model_copy(
                update={"status": "done" if error is None else "pending", "attempts": rec.attempts + attempts, "error": error}
            )
            if error is None:
                self.log(f"qualitycheck canary: fallback {rec.action} done for route {rec.route}")
        state.actions[rec.route] = done
        return done

    # ------------------------------------------------------------ outputs
    def _append(self, record: CanaryRecord) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / CANARY_LOG, "a", encoding="utf-8") as f:
            f.write(record.model_dump_json() + "\n")

    def _publish(self, record: CanaryRecord) -> None:
        if self.metrics is not None:
            self.metrics.update(record, [r for _, r in self._unwatched(record)])

    # ------------------------------------------------------------ what controllers read
    @property
    def stale_after_s(self) -> float:
        """A window this late is not coming: intervals beyond the longest one scrape or query may hold a window up.

        A source slower than that leaves its guardrails not evaluated anyway, so erring short only says so earlier.
        """
        return float(STALE_AFTER_INTERVALS * self.c.interval_s + LONGEST_REQUEST_S)

    def status(self) -> CanaryStatus:
        """The decision for now, per route (`/qc/status`): the last window's guardrails, the unwatched ones, the state."""
        rec = self.last
        if rec is None:
            state = read_state(self.out, self.dry_run)
            routes = [state.routes.get(r, RouteState(route=r, state="armed")) for r in self.routes]
        else:
            routes = [r for r in rec.routes if r.route in self.routes]
        per_route: dict[str, list[GuardrailWindow]] = {r: [] for r in self.routes}
        for gw in rec.guardrails if rec is not None else []:
            per_route[gw.result.route].append(gw)
        for route, result in self._unwatched(rec):
            per_route[route].append(GuardrailWindow(result=result))
        return build_status(
            now=self.clock(),
            record=rec,
            routes=routes,
            guardrails=per_route,
            interval_s=self.c.interval_s,
            window_s=self.window_s,
            stale_after_s=self.stale_after_s,
            trip_after=self.c.trip_after,
            dry_run=self.dry_run,
            decided=self.decided,
        )

    def _unwatched(self, rec: CanaryRecord | None) -> list[tuple[str, GuardrailResult]]:
        """Each route's guardrails the window holds no result for, as not evaluated: unwatched ones, or all before a first window."""
        if rec is not None and not rec.unwatched:
            return []
        out: list[tuple[str, GuardrailResult]] = []
        for rule in self.rules:
            if rec is not None and rule.name not in rec.unwatched:
                continue
            why = _UNWATCHED.get(rule.name, "no source") if rec is not None else "no window decided yet"
            for route in self.routes if _route(rule) == ALL_ROUTES else [_route(rule)]:
                out.append((route, dataclasses.replace(_judge(rule, _Reading(missing=why)), route=route)))
        return out

    # ------------------------------------------------------------ loops
    async def once(self) -> CanaryRecord:
        """One window: scrape now, then every interval until the window is covered (PromQL answers at once)."""
        if not self.pages:
            return await self.step()
        start = self.clock()
        await self.scrape()
        while self.clock() - start < self.window_s:
            await asyncio.sleep(min(self.c.interval_s, max(0.0, start + self.window_s - self.clock())))
            await self.scrape()
        return await self.evaluate()

    async def watch(self, *, stop: asyncio.Event | None = None, max_windows: int | None = None) -> CanaryRecord | None:
        """Evaluate a window every interval until `stop` is set (or `max_windows` were evaluated)."""
        stop = stop or asyncio.Event()
        last: CanaryRecord | None = None
        if self.pages and not await _unless_stopped(self.scrape(), stop):  # the first window's start
            return None
        n = 0
        while not stop.is_set() and (max_windows is None or n < max_windows):
            try:
                await asyncio.wait_for(stop.wait(), self.c.interval_s)
                break
            except TimeoutError:
                pass
            if not await _unless_stopped(self.scrape(), stop):
                break
            last = await self.evaluate()
            n += 1
            self.log(window_line(last))
        return last


async def _unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Await `work` unless `stop` is set first, then cancel it: True when it finished.

    A scrape of a source that stops answering may take its full retry budget,
    and SIGTERM must not wait for that. Only scraping is abandoned this way:
    an evaluation, which updates the state and may run the fallback, always
    completes once begun.
    """
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the watch itself cancelled: the scrape goes with it
        task.cancel()
        raise
    finally:
        stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.wait({task})  # let it unwind; its cancellation stays inside it, ours would not be swallowed
    return False


def window_line(r: CanaryRecord) -> str:
    parts = []
    for g in r.guardrails:
        v = g.result.observed
        shown = "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
        state = {True: "ok", False: f"FAIL×{g.streak}", None: "not evaluated"}[g.result.passed]
        parts.append(f"{g.result.route}/{g.result.name}={shown} {state}")
    return f"qualitycheck canary: {r.status}: " + ("; ".join(parts) or "nothing watched")


def _route(rule: Rule) -> str:
    return str(getattr(rule, "route", ALL_ROUTES))


def _latency(candidate_s: float, baseline_s: float) -> Evidence:
    return Evidence(latency={"baseline": {"tpot_ms": {"p95": baseline_s * 1000}}, "candidate": {"tpot_ms": {"p95": candidate_s * 1000}}})


def _judge(rule: Rule, reading: _Reading) -> GuardrailResult:
    """The gate's rule on the window's evidence; without enough evidence, the rule's own not-evaluated result with the reason."""
    if reading.evidence is None or reading.missing is not None:
        blank = rule.evaluate(Evidence())
        return dataclasses.replace(blank, observed=None, passed=None, message=f"not evaluated: {reading.missing or 'no evidence'}")
    result = rule.evaluate(reading.evidence)
    if isinstance(result.observed, float) and not math.isfinite(result.observed):
        return dataclasses.replace(result, observed=None, passed=None, message="not evaluated: the observation is not a number")
    return result


def rearm(out: Path, route: str, *, dry_run: bool = False, clock: Callable[[], float] = time.time) -> RouteState:
    """Put a tripped route back on speculation: its streaks and its action record are cleared, so a new trip acts again."""
    with locked_state(out, dry_run) as state:
        before = state.route(route)
        state.routes[route] = RouteState(route=route, state="armed")
        state.streaks = {k: v for k, v in state.streaks.items() if not k.startswith(f"{route}/")}
        state.actions.pop(route, None)
    record = CanaryRecord(kind="rearm", t=clock(), status="healthy", dry_run=dry_run, routes=[state.routes[route]])
    out.mkdir(parents=True, exist_ok=True)
    with open(out / CANARY_LOG, "a", encoding="utf-8") as f:
        f.write(record.model_dump_json() + "\n")
    return before
