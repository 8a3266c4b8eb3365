"""Secrets never leave the process: not in the run folder, the output, debug logs or error messages.

On top of the foundation's check of the store: here the servers are
hostile — they echo the Authorization header and custom header values
back in their error bodies, as some proxies and gateways do — and every
logger runs at DEBUG. Every byte of every file in the run folder (SQLite
WAL included) and everything printed or logged is searched for the
secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from qualitycheck.cli._main import main
from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, raw_chat_server, write_suite

API_KEY = "sk-hardening-secret-7f3a9c"
HEADER_SECRET = "hdr-hardening-secret-51e0"


@pytest.fixture
def echo_server() -> Iterator[str]:
    """Answers normally, except: 'echo503' → 503 echoing the auth headers once, 'echo400' → 400 echoing them always."""
    state: dict[str, Any] = {"seen": set()}

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        echoed = f"invalid credentials: {request.headers.get('Authorization')} / {request.headers.get('X-Api-Key')}"
        if "qa 1?" in prompt or ("qa 2?" in prompt and prompt not in state["seen"]):
            state["seen"].add(prompt)
            status = 400 if "qa 1?" in prompt else 503
            return web.json_response({"error": {"message": echoed}}, status=status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if "qa 3?" in prompt:  # an error event mid-stream, echoing too
            await resp.write(b'data: {"error": {"message": "' + echoed.encode() + b'"}}\n\n')
            return resp
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    with raw_chat_server(handler) as url:
        yield url


def test_secrets_stay_out_of_folder_output_logs_and_errors(
    tmp_path: Path, echo_server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("QC_HARDENING_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_LOG", "debug")
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(5, "qa", checks={"contains": ["fine"]}))
    cfg = tmp_path / "qc.yaml"
    cfg.write_text(
        f"baseline: {{url: '{echo_server}', model: m, api_key_env: QC_HARDENING_KEY, headers: {{X-Api-Key: {HEADER_SECRET}}}}}\n"
        "candidate: {url: 'CAND', model: m, api_key_env: QC_HARDENING_KEY}\n"
        "run: {retries: 1, backoff_s: 0.0, timeout_s: 5}\n",
        encoding="utf-8",
    )
    caplog.set_level(logging.DEBUG)
    with TestServer(default="fine") as cand:
        cfg.write_text(cfg.read_text().replace("CAND", cand.url), encoding="utf-8")
        code = main(["run", "-c", str(cfg), "--suite", str(suite), "--out", str(tmp_path / "run"), "--no-preflight"])
        assert cand.requests("/chat/completions")[0]["auth"] == f"Bearer {API_KEY}"  # the key was really used
        for stage in ("score", "report", "gate"):
            main([stage, str(tmp_path / "run")])
    assert code in (0, 1)
    out = capsys.readouterr()
    texts = {"stdout": out.out, "stderr": out.err, "logs": caplog.text}
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            texts[str(f)] = f.read_bytes().decode("latin-1")
    for where, text in texts.items():
        for secret in (API_KEY, HEADER_SECRET):
            assert secret not in text, f"{secret} leaked into {where}"
    # the errors themselves are kept, with the secrets cut out
    from qualitycheck.core._store import RunStore

    with RunStore.open(tmp_path / "run") as store:
        errors = {r.case_id: r.error for r in store.responses() if r.error is not None}
    assert errors["qa-1"].status == 400 and "<redacted>" in errors["qa-1"].message
    assert errors["qa-3"].kind == "http_status" and "<redacted>" in errors["qa-3"].message
    assert "qa-2" not in errors  # the 503 was retried and answered
