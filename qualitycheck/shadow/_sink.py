"""The shadow sink: a gateway mirrors production requests here; the sink asks both targets and records the pair.

Teams that already run a gateway in front of vLLM (nginx `mirror`, Envoy
`request_mirror_policies`, Istio `mirror`) will not put a new process in the
callers' path, and need not: the gateway sends each caller's request to
production and a copy to the sink, and discards the sink's answer. The caller
is never served from here.

nginx holds the caller's request open until its mirror subrequest has been
answered (measured in tests/e2e/test_1e_sink_nginx.py), so the one thing the
sink must do fast is answer: every request is read and answered at once with
an empty success, and everything else (the two requests, the parsing, the
case, the redaction, the store) happens after, on tasks and the writer
thread. A request beyond `max_inflight` is answered the same and counted as
dropped, never queued.

For each sampled chat or completions request the baseline (a second replica
of production, or the same one) and the candidate are asked at the same
moment, each with its own configured key; the caller's `Authorization` is
never sent anywhere nor stored. From there the pair is the proxy's: the same
noise-floor re-ask, cases, redaction, folders, rotation, `/qc/health` and
`/qc/metrics`. Envoy and Istio add `-shadow` to the mirrored request's
authority; the sink does not route on the host, so any host is accepted.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from qualitycheck.generation._client import Endpoint, RequestPlan
from qualitycheck.shadow._proxy import AS_REQUESTED, MIRRORED, ShadowProxy, _answer_expect, _fingerprint, _Pair

__all__ = ["ShadowSink"]


class ShadowSink(ShadowProxy):
    """A listening sink: answers at once, then asks the baseline and the candidate together and records the pair."""

    SIDES = 2
    """Requests a pair has upstream at once: the baseline and the candidate."""

    _baseline: Endpoint | None = None

    async def start(self) -> str:
        url = await super().start()
        cfg = self.cfg
        assert cfg.baseline is not None and self._candidate is not None and self._mirror_session is not None
        self._baseline = Endpoint("baseline", cfg.baseline, self._candidate.opts, self._mirror_session, parse_after=True)
        return url

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path.startswith("/qc/"):
            return self._own(path)
        if "Expect" in request.headers and (refused := await _answer_expect(request)) is not None:
            return refused
        kind = MIRRORED.get(path) if request.method == "POST" else None
        body = await request.read()
        self.metrics.requests[kind or "other"].inc()
        self.period.requests += 1
        if kind is not None:
            self._admit(kind, body, request.headers)  # a task of its own: it starts once this answer is written
        return web.Response(status=204)  # the gateway discards the answer: an empty success says all it needs

    async def _mirror(self, pair: _Pair) -> None:
        """Both targets at the same moment, the caller's body as sent (each target's configured model in place of its own)."""
        assert self._candidate is not None and self._baseline is not None
        try:
            try:
                body = json.loads(pair.raw)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                pair.dropped = pair.dropped or "not_json"
                return
            pair.body = body
            self.metrics.mirrored.inc()
            self.period.mirrored += 1
            base_model = self.cfg.baseline.model if self.cfg.baseline is not None else AS_REQUESTED
            to_base = body if base_model == AS_REQUESTED or body.get("model") == base_model else {**body, "model": base_model}
            plans = (
                RequestPlan(pair.kind, to_base, _fingerprint(self._root, pair.kind, pair.raw)),
                self._candidate_plan(pair, body),
            )
            pair.baseline, pair.candidate = await asyncio.gather(
                self._baseline.send_plan(pair.case_id, plans[0]), self._candidate.send_plan(pair.case_id, plans[1])
            )
        finally:
            if (pair.candidate is None or pair.baseline is None) and pair.dropped is None:
                pair.dropped = "stopped"
            self._maybe_complete(pair)
