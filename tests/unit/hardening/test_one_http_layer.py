"""Every caller reads a failing server the way generation does: one HTTP layer (core._http).

The server here answers every request with one status and an error body that
echoes the caller's Authorization header back, as some gateways do. For a
404 (not retried) and a 503 (retried), the preflight, the /metrics scrape and
the judge must report the runner's own error message, with the key cut out,
after the runner's number of tries.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from qualitycheck.core._cases import Case
from qualitycheck.core._config import JudgeTarget, RunOptions, Target
from qualitycheck.core._records import ErrorInfo, Response
from qualitycheck.core._store import RunStore
from qualitycheck.generation import Endpoint, preflight, scrape
from qualitycheck.generation._metrics import SCRAPE_HTTP
from qualitycheck.generation._preflight import preflight_http
from qualitycheck.judge._judge import JudgeOptions, score_judge
from tests.helpers import raw_server

KEY = "sk-one-layer-secret-93c1"
ENV = "QC_ONE_LAYER_KEY"
RETRIES = 1
OPTS = RunOptions(retries=RETRIES, backoff_s=0.0, timeout_s=5)
CASE = Case(id="c1", category="qa", messages=[{"role": "user", "content": "hi"}], checks={"judge": {"mode": "pairwise"}})


@pytest.fixture(params=[404, 503])
def failing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int, Counter[str]]]:
    """(url, status, requests per path) of a server failing everything with `status`, echoing the key."""
    monkeypatch.setenv(ENV, KEY)
    status: int = request.param
    seen: Counter[str] = Counter()

    async def handler(req: web.Request) -> web.Response:
        seen[req.path] += 1
        await req.read()
        return web.json_response({"error": {"message": f"invalid credentials: {req.headers.get('Authorization')}"}}, status=status)

    with raw_server(handler) as url:
        yield url, status, seen


def tries(status: int) -> int:
    """How many requests the runner sends for one call: 404 fails at once, 503 is retried."""
    return 1 if status == 404 else RETRIES + 1


def runner_error(url: str) -> ErrorInfo:
    ep = Endpoint("baseline", Target(url=url, model="m", api_key_env=ENV), OPTS)

    async def go() -> Response:
        try:
            return await ep.send(CASE)
        finally:
            await ep.aclose()

    r = asyncio.run(go())
    assert r.error is not None
    return r.error


def test_the_runner_maps_and_redacts(failing: tuple[str, int, Counter[str]]) -> None:
    url, status, seen = failing
    err = runner_error(url)
    assert (err.kind, err.status) == ("http_status", status)
    assert err.message == f"HTTP {status}: invalid credentials: Bearer <redacted>"
    assert seen["/v1/chat/completions"] == tries(status)


def test_preflight_reads_errors_like_the_runner(failing: tuple[str, int, Counter[str]]) -> None:
    url, status, seen = failing
    expected = runner_error(url).message
    seen.clear()
    target = Target(url=url, model="m", api_key_env=ENV)
    res = asyncio.run(preflight(target, target, [CASE], http=preflight_http(OPTS)))
    details = {c.name: c.detail for c in res.checks}
    assert all(KEY not in d for d in details.values()), details
    assert all(c.passed is None for c in res.checks)
    assert f"{url}/v1/models: {expected}" in details["served_model"]
    assert f"{url}/tokenize: {expected}" in details["tokenize"]
    assert seen["/v1/models"] == 2 * tries(status)  # both sides asked, each retried like the runner
    assert seen["/tokenize"] == 2 * tries(status)


def test_scrape_reads_errors_like_the_runner(failing: tuple[str, int, Counter[str]]) -> None:
    url, status, seen = failing
    expected = runner_error(url).message
    http = dataclasses.replace(SCRAPE_HTTP, retries=OPTS.retries, backoff_s=OPTS.backoff_s)  # as a run scrapes around generation
    snap = asyncio.run(scrape(Target(url=url, model="m", api_key_env=ENV), http=http))
    assert snap.ok is False
    assert snap.error == expected
    assert seen["/metrics"] == tries(status)


def test_the_judge_reads_errors_like_the_runner(failing: tuple[str, int, Counter[str]], tmp_path: Path) -> None:
    url, status, seen = failing
    expected = runner_error(url)
    seen.clear()
    store = RunStore.create(tmp_path / "run", {"targets": {}, "repeats": 1, "suite_fingerprint": "t"}, [CASE])
    for side, text in (("baseline", "one answer"), ("candidate", "another answer")):
        store.put_response(Response(case_id=CASE.id, target=side, fingerprint="f", text=text))
    score_judge(store, JudgeTarget(url=url, model="j", api_key_env=ENV), JudgeOptions.of_run(OPTS))
    scores = [s for s in store.scores() if s.check == "judge"]
    store.close()
    assert scores and all(s.status == "error" for s in scores)
    error = scores[0].detail["error"]
    assert KEY not in error
    assert error == f"judge endpoint failed: {expected.kind}: {expected.message}"
    assert seen["/v1/chat/completions"] == 2 * tries(status)  # both orders, each retried like the runner
