"""The watcher's own state on `/qc/metrics` (Prometheus text, written by prometheus_client) for alerting.

Gauges are replaced at every window, so a series disappears when its route
or guardrail is no longer watched. A guardrail's `passed` is 1, 0, or -1
for not evaluated: an alert on `== 0` fires on failures, on `< 1` also on
blind spots.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from qualitycheck.canary._record import CanaryRecord

__all__ = ["CanaryMetrics", "serve_metrics"]


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

    def update(self, rec: CanaryRecord) -> None:
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


async def serve_metrics(metrics: CanaryMetrics, listen: str) -> tuple[web.AppRunner, str]:
    """Serve `/qc/metrics` on HOST:PORT inside the running loop; returns the runner (to clean up) and the URL."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.text(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    host, _, port = listen.rpartition(":")
    app = web.Application()
    app.router.add_get("/qc/metrics", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port))
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else int(port)
    return runner, f"http://{host}:{bound}/qc/metrics"
