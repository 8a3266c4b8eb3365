"""The watcher's HTTP face on `--listen`: `/qc/metrics` for alerting, `/qc/status`, `/qc/ready` and Flagger's webhooks
for rollout controllers; one aiohttp server on the watcher's own event loop.

Gauges are replaced at every window, so a series disappears when its route
or guardrail is no longer watched. A guardrail's `passed` is 1, 0, or -1
for not evaluated (an unwatched guardrail, configured but with no source, is
-1 too): an alert on `== 0` fires on failures, on `< 1` also on blind spots.

`/qc/status` always answers 200 with the decision (`canary._status`), also
before the first window (every route's `passed` null): a controller's
measurement is then Inconclusive, never an error that counts toward
aborting. `/qc/ready` is what a readiness probe reads: 503 until a first
window is decided. The answers are built from what the last window left in
memory, so they never wait on a scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from qualitycheck.canary._flagger import BAD_PAYLOAD, HOOKS, UNKNOWN, answer_hook, parse_payload
from qualitycheck.canary._record import CanaryRecord
from qualitycheck.canary._status import CanaryStatus
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.verdict._gate import GuardrailResult

__all__ = ["CanaryMetrics", "serve"]


class CanaryMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tripped = Gauge("qc_canary_route_tripped", "1 while the route is off speculation (until re-armed)", ["route"], registry=r)
        self.passed = Gauge(
            "qc_canary_guardrail_passed", "1 passed, 0 failed, -1 not evaluated (last window)", ["route", "guardrail"], registry=r
        )
        self.observed = Gauge(
            "qc_canary_guardrail_observed", "the guardrail's observation in the last window", ["route", "guardrail"], registry=r
        )
        self.streak = Gauge("qc_canary_guardrail_failing_windows", "consecutive failing windows", ["route", "guardrail"], registry=r)
        self.source_up = Gauge("qc_canary_source_up", "1 when the source answered in the last window", ["source"], registry=r)
        self.pending = Gauge("qc_canary_actions_pending", "fallback actions that failed and are being retried", registry=r)
        self.alerts = Gauge("qc_canary_alerts", "alerts raised by the last window", registry=r)
        self.windows = Counter("qc_canary_windows", "windows evaluated, by status", ["status"], registry=r)
        self.last = Gauge("qc_canary_last_window_timestamp_seconds", "end of the last evaluated window", registry=r)
        self.acceptance = Gauge("qc_canary_acceptance_rate", "draft acceptance rate over the last window", registry=r)
        self.kv = Gauge("qc_canary_kv_cache_usage", "KV-cache usage (0..1), mean over the last window", ["side"], registry=r)
        self.gpu_util = Gauge(
            "qc_canary_gpu_utilization_percent", "GPU utilisation (DCGM), mean over the last window", ["side"], registry=r
        )
        self.gpu_mem = Gauge("qc_canary_gpu_memory_used_mib", "GPU memory used (DCGM), mean over the last window", ["side"], registry=r)

    def update(self, rec: CanaryRecord, unwatched: Iterable[GuardrailResult] = ()) -> None:
        """Replace every gauge with the window's values; `unwatched`: per-route results of guardrails with no source (-1)."""
        for g in (self.tripped, self.passed, self.observed, self.streak, self.source_up, self.kv, self.gpu_util, self.gpu_mem):
            g.clear()
        for rs in rec.routes:
            self.tripped.labels(rs.route).set(1 if rs.state == "tripped" else 0)
        for gw in rec.guardrails:
            res = gw.result
            labels = (res.route, res.name)
            self.passed.labels(*labels).set({True: 1, False: 0, None: -1}[res.passed])
            if isinstance(res.observed, (int, float)):
                self.observed.labels(*labels).set(float(res.observed))
            self.streak.labels(*labels).set(gw.streak)
        for res in unwatched:
            self.passed.labels(res.route, res.name).set(-1)
        for s in rec.sources:
            self.source_up.labels(s.name).set(1 if s.ok else 0)
        self.pending.set(sum(1 for a in rec.actions if a.status == "pending"))
        self.alerts.set(len(rec.alerts))
        self.windows.labels(rec.status).inc()
        self.last.set(rec.t)
        rate = rec.acceptance.get("rate")
        if rate is not None:
            self.acceptance.set(rate)
        for side, facts in rec.gpu.items():
            if facts.kv_cache_usage is not None:
                self.kv.labels(side).set(facts.kv_cache_usage)
            if facts.gpu_utilization is not None:
                self.gpu_util.labels(side).set(facts.gpu_utilization)
            if facts.gpu_memory_used_mib is not None:
                self.gpu_mem.labels(side).set(facts.gpu_memory_used_mib)

    def text(self) -> bytes:
        return generate_latest(self.registry)


async def serve(
    metrics: CanaryMetrics, status: Callable[[], CanaryStatus], listen: str, log: Callable[[str], None]
) -> tuple[web.AppRunner, str]:
    """Serve the watcher on HOST:PORT inside the running loop; returns the runner (to clean up) and the base URL.

    A port in use or an address not on this host is bad input (exit 2), said as such.
    """

    async def get_metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics.text(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def get_status(request: web.Request) -> web.Response:
        return web.Response(text=status().model_dump_json(), content_type="application/json")

    async def get_ready(request: web.Request) -> web.Response:
        s = status()
        if s.ready:
            return web.json_response({"status": "ready", "windows": s.window.decided})
        return web.json_response({"status": "waiting for the first window", "interval_s": s.window.interval_s}, status=503)

    async def post_flagger(request: web.Request) -> web.Response:
        hook = request.match_info["hook"]
        if hook not in HOOKS:
            known = ", ".join(HOOKS)
            return web.json_response({"ok": False, "reason": f"no Flagger webhook type {hook!r} (known: {known})"}, status=UNKNOWN)
        payload = parse_payload(await request.read())
        if isinstance(payload, str):
            return web.json_response({"hook": hook, "ok": False, "reason": payload}, status=BAD_PAYLOAD)
        answer = answer_hook(hook, payload, status())
        if answer.log is not None:
            log(answer.log)
        return web.json_response(answer.body, status=answer.status)

    bracketed, _, port = listen.rpartition(":")
    host = bracketed.strip("[]")  # an IPv6 address is written [::1]:PORT
    app = web.Application()
    app.router.add_get("/qc/metrics", get_metrics)
    app.router.add_get("/qc/status", get_status)
    app.router.add_get("/qc/ready", get_ready)
    app.router.add_post("/qc/flagger/{hook}", post_flagger)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port))
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError([Problem("command line", None, "--listen", f"cannot listen on {listen} ({exc.strerror or exc})")]) from None
    bound = runner.addresses[0][1] if runner.addresses else int(port)
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}"
