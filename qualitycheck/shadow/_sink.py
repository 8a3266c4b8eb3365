"""The shadow sink: a gateway mirrors production requests here; the sink asks both targets and records the pair.

Teams that already run a gateway in front of vLLM (nginx `mirror`, Envoy
`request_mirror_policies`, Istio `mirror`) will not put a new process in the
callers' path, and need not: the gateway sends each caller's request to
production and a copy to the sink, and discards the sink's answer. The caller
is never served from here.

nginx holds the caller's request open until its mirror subrequest has been
answered (measured in tests/e2e/test_1c_sink_nginx.py), so the one thing the
sink must do fast is answer: every request is read and answered at once with
an empty success, and everything else (the two requests, the parsing, the
case, the redaction, the store) happens after, on tasks and the writer
thread. A request beyond `max_inflight` is answered the same and counted as
dropped, never queued.

For each sampled chat or completions request the mirror side
(`shadow._mirror`, in a process of its own under `qualitycheck shadow`) asks
the baseline (a second replica of production, or the same one) and the
candidate at the same moment, each with its own configured key; the caller's `Authorization` is
never sent anywhere nor stored. From there the pair is the proxy's: the same
noise-floor re-ask, cases, redaction, folders, rotation, `/qc/ready`,
`/qc/health` and `/qc/metrics`. Envoy and Istio add `-shadow` to the mirrored request's
authority; the sink does not route on the host, so any host is accepted.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from qualitycheck.shadow._proxy import ShadowProxy

__all__ = ["ShadowSink"]


class ShadowSink(ShadowProxy):
    """A listening sink: answers at once; its mirror side (`MirrorSide(ask_baseline=True)`) asks both targets and records the pair."""

    async def _respond(self, request: web.BaseRequest, body: bytes, handed: Any) -> web.StreamResponse:
        """An empty success at once: the gateway discards it; the handed-over request's work starts after it is written."""
        return web.Response(status=204)
