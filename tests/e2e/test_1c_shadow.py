"""The shadow proxy in front of a real vLLM baseline, mirroring to the real ngram candidate.

A load generator sends streaming and non-streaming chat requests through the
proxy from several clients at once; every caller's content must be what a
direct request to the baseline gives, the run folder must hold every pair,
and `qualitycheck gate DIR` must give a verdict. Runs on the fp32 pair the
earlier modules started (no new server start).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from qualitycheck.core._store import RunStore
from tests.e2e.e2e_helpers import MODEL, SUITES, answer_of, explain, qc, summary_of, write_config
from tests.e2e.gateway import get

pytestmark = [pytest.mark.e2e, pytest.mark.engines("fp32", "fp32-ngram")]

MAX_TOKENS = 40


def _requests() -> list[dict[str, Any]]:
    """The fp32 suite's chat prompts, each sent once streamed and once not, greedy (the two servers agree on greedy fp32)."""
    out = []
    for line in (SUITES / "fp32.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if not case.get("messages"):
            continue
        for stream in (True, False):
            body = {"model": MODEL, "messages": case["messages"], "temperature": 0, "max_tokens": MAX_TOKENS, "stream": stream}
            if stream:  # as most streaming clients do: the token count is what TPOT needs (the proxy cannot add it to a stream)
                body["stream_options"] = {"include_usage": True}
            out.append({"route": case["category"], "body": body})
    return out[:16]


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def shadowed(engines: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    servers = engines.use("fp32", "fp32-ngram")
    baseline, candidate = servers["fp32"].url, servers["fp32-ngram"].url
    work = tmp_path_factory.mktemp("shadow")
    out = work / "run"
    requests = _requests()
    direct = [_post(baseline, r["body"]) for r in requests]  # one at a time, before any load
    log = work / "proxy.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qualitycheck", "shadow", "-c", str(write_config(work / "qualitycheck.yaml")), "--listen", "127.0.0.1:0"]
            + ["--baseline", baseline, "--candidate", candidate, "--model", MODEL, "--out", str(out), "--sample", "1.0"],
            stdout=err,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        )
    try:
        deadline = time.monotonic() + 120
        while not (m := re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        url = m.group(1)
        with ThreadPoolExecutor(4) as pool:  # four clients at once, streamed and non-streamed requests mixed
            proxied = list(pool.map(lambda r: _post(url, r["body"], {"X-Route": r["route"]}), requests))
        deadline = time.monotonic() + 300
        while True:  # every mirror answered and stored before the stop
            text = get(url + "/qc/metrics")
            stored = re.search(r"^qc_shadow_stored_total (\S+)", text, re.M)
            if stored and float(stored.group(1)) >= len(requests):
                break
            assert time.monotonic() < deadline, text
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return {"requests": requests, "direct": direct, "proxied": proxied, "out": out, "code": code, "log": log.read_text(errors="replace")}


def test_every_caller_gets_the_baselines_content(shadowed: dict[str, Any]) -> None:
    assert shadowed["code"] in (0, 1), shadowed["log"][-4000:]
    for r, (d_status, d_raw), (p_status, p_raw) in zip(shadowed["requests"], shadowed["direct"], shadowed["proxied"], strict=True):
        stream = r["body"]["stream"]
        assert p_status == d_status == 200
        assert answer_of(p_raw, stream)["content"] == answer_of(d_raw, stream)["content"], r["body"]["messages"][-1]["content"]


def test_the_run_folder_holds_every_pair_with_both_answers(shadowed: dict[str, Any]) -> None:
    with RunStore.open(shadowed["out"]) as store:
        cases = store.cases()
        responses = list(store.responses())
    assert len(cases) == len(shadowed["requests"])
    assert {c.route for c in cases} == {r["route"] for r in shadowed["requests"]}
    by_target: dict[str, list[Any]] = {}
    for r in responses:
        by_target.setdefault(r.target, []).append(r)
    assert len(by_target["baseline"]) == len(by_target["candidate"]) == len(cases)
    assert all(r.ok and r.text and r.e2e_s for r in by_target["baseline"] + by_target["candidate"])
    streamed = [r for r in by_target["baseline"] if len(r.chunk_times) > 1]
    assert streamed, "no streamed baseline answer was timed chunk by chunk"
    assert all(c.checks.exact is not None for c in cases)  # greedy requests: identity is the check, as replay derives it


def test_gate_gives_a_verdict_with_acceptance_from_the_candidates_metrics(shadowed: dict[str, Any]) -> None:
    out: Path = shadowed["out"]
    proc = qc("gate", str(out))
    assert proc.returncode == 0, explain(proc)
    s = summary_of(out)
    assert s["verdict"] == "pass" and s["cases"] == len(shadowed["requests"])
    assert s["acceptance"]["rate"] is not None and s["acceptance"]["draft_tokens"] > 0
    period = json.loads((out / "shadow.json").read_text())
    assert period["stored"] == len(shadowed["requests"]) and period["closed_because"] == "stopped"
