"""`qualitycheck shadow` as a process: SIGTERM drains, `kill -9` loses only pairs in flight, no key or PII reaches disk or logs."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._records import ShadowPeriods
from qualitycheck.core._store import RunStore
from qualitycheck.shadow._settings import ShadowSettings
from qualitycheck.testserver import TestServer

from .conftest import shadow_config
from .test_forwarding import call, chat

CALLER_KEY = "sk-callerkey0123456789abcdefXYZ"
CANDIDATE_KEY = "sk-candidatekey9876543210zyxwvUT"
BASELINE_KEY = "sk-baselinekey5555555555qqqqqPP"
PII = {
    "email": "jane.doe.4711@example.org",
    "phone": "+44 20 7946 0958",
    "card": "4111 1111 1111 1111",
    "iban": "DE89 3704 0044 0532 0130 00",
    "ip": "10.23.45.67",
    "secret": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
}
PII_FORMS = [*PII.values(), "4111111111111111", "DE89370400440532013000", "jane.doe.4711"]


class ShadowProcess:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path):
        self.proc, self.url, self.log = proc, url, log

    @property
    def mirror_pid(self) -> int:
        """The mirror process's pid, as the listening line of the log names it."""
        m = re.search(r"mirror process (\d+)", self.log.read_text())
        assert m, self.log.read_text()
        return int(m.group(1))

    def metric(self, name: str, **labels: str) -> float:
        text = call(self.url, "/qc/metrics")[2].decode()
        want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
        for line in text.splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0

    def wait_metric(self, name: str, value: float, timeout: float = 30, **labels: str) -> None:
        deadline = time.monotonic() + timeout
        while self.metric(name, **labels) != value:
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}{labels} never reached {value} (now {self.metric(name, **labels)})")
            time.sleep(0.02)


@contextmanager
def shadow_process(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[ShadowProcess]:
    log = tmp_path / "proxy.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qualitycheck", "shadow", "--listen", "127.0.0.1:0", *args],
            stdout=err,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
        )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
            if m:
                url = m.group(1)
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the proxy did not start (exit {proc.poll()}):\n{log.read_text(errors='replace')}")
            else:
                time.sleep(0.05)
        yield ShadowProcess(proc, url, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def stream_in_thread(url: str, body: dict[str, Any], results: list[Any], headers: dict[str, str] | None = None) -> threading.Thread:
    def go() -> None:
        try:
            results.append(call(url, "/v1/chat/completions", body, headers))
        except (OSError, http.client.HTTPException) as exc:  # the proxy was killed under it
            results.append(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def qc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qualitycheck", *args], capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"}
    )


def test_sigterm_stops_accepting_drains_in_flight_requests_and_writes_the_summary(tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(12))
    with TestServer(default=words, itl_s=0.1) as base, TestServer(default=words, itl_s=0.1) as cand:
        out = tmp_path / "run"
        with shadow_process(tmp_path, "--baseline", base.url, "--candidate", cand.url, "--out", str(out), "--sample", "1") as sp:
            body = chat("drain me", stream=True, temperature=0)
            results: list[Any] = []
            threads = [stream_in_thread(sp.url, body, results) for _ in range(3)]
            deadline = time.monotonic() + 20
            while len(base.requests("/chat/completions")) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            sp.proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join(30)
            code = sp.proc.wait(60)
        direct = call(base.url, "/v1/chat/completions", body)
    assert [r[0] for r in results] == [200, 200, 200]
    assert all(r[2] == direct[2] for r in results)  # whole answers, not cut by the stop
    log = sp.log.read_text()
    assert code in (0, 1), log
    assert "stopping: draining" in log and "3 of 3 pairs in flight finished" in log
    period = json.loads((out / "shadow.json").read_text())
    assert period["closed_because"] == "stopped" and period["stored"] == 3
    assert period["drain"]["in_flight"] == 3 and period["drain"]["cancelled"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cases"] == 3 and summary["verdict"] in ("pass", "inconclusive", "fail")


def test_kill_9_loses_at_most_the_pairs_in_flight(tmp_path: Path) -> None:
    with TestServer(default="a b c d", itl_s=0.0) as base, TestServer(default="a b c d") as cand:
        out = tmp_path / "run"
        with shadow_process(tmp_path, "--baseline", base.url, "--candidate", cand.url, "--out", str(out), "--sample", "1") as sp:
            for i in range(4):
                assert call(sp.url, "/v1/chat/completions", chat(f"acknowledged {i}", temperature=0))[0] == 200
            sp.wait_metric("qc_shadow_stored_total", 4.0)  # acknowledged: stored
            base.itl_s = 0.5
            results: list[Any] = []
            for i in range(2):
                stream_in_thread(sp.url, chat(f"in flight {i}", stream=True), results)
            sp.wait_metric("qc_shadow_inflight", 2.0)
            sp.proc.kill()
            sp.proc.wait(10)
    with RunStore.open(out) as store:
        cases = store.cases()
        responses = list(store.responses())
    assert sorted(c.messages[0]["content"] for c in cases if c.messages) == [f"acknowledged {i}" for i in range(4)]
    assert len(responses) == 8
    gate = qc("gate", str(out))
    assert gate.returncode in (0, 1), gate.stderr
    assert json.loads((out / "summary.json").read_text())["cases"] == 4


@pytest.mark.parametrize("mode", ["proxy", "sink"])
def test_no_key_and_no_planted_pii_in_any_file_of_the_run_folder_or_the_log(tmp_path: Path, mode: str) -> None:
    """The sink's caller is the gateway: the caller's key it relays is sent nowhere, each target gets its own."""
    answer = f"Sure, I will write to {PII['email']} and charge {PII['card']}."
    cfg = tmp_path / "qualitycheck.yaml"
    cfg.write_text(
        "baseline:\n  api_key_env: QC_SHADOW_BASE_KEY\n"
        "candidate:\n  api_key_env: QC_SHADOW_TEST_KEY\n"
        "speculative_decoding_guardrails:\n  max_error_rate: '1%'\n  max_quality_regression_cases: 0\n",
        encoding="utf-8",
    )
    with TestServer(default=answer) as base, TestServer(default=answer) as cand:
        out = tmp_path / "run"
        args = (
            "-c",
            str(cfg),
            "--baseline",
            base.url,
            "--candidate",
            cand.url,
            "--model",
            "test-model",
            "--out",
            str(out),
            "--sample",
            "1",
            *(["--sink"] if mode == "sink" else []),
        )
        keys = {"QC_SHADOW_TEST_KEY": CANDIDATE_KEY, "QC_SHADOW_BASE_KEY": BASELINE_KEY}
        with shadow_process(tmp_path, *args, env=keys) as sp:
            for kind, value in PII.items():
                body = chat(f"My {kind} is {value}, please help.", temperature=0, stream=kind != "ip")
                status, _, _ = call(
                    sp.url, "/v1/chat/completions", body, headers={"Authorization": f"Bearer {CALLER_KEY}", "X-Route": "support"}
                )
                assert status == (204 if mode == "sink" else 200)
            sp.wait_metric("qc_shadow_stored_total", float(len(PII)))
            sp.proc.send_signal(signal.SIGTERM)
            assert sp.proc.wait(120) in (0, 1), sp.log.read_text()
        # the proxy forwards the caller's key to the baseline (the callers' own request); the sink sends its configured one
        base_key = CALLER_KEY if mode == "proxy" else BASELINE_KEY
        assert {e["auth"] for e in base.requests("/chat/completions")} == {f"Bearer {base_key}"}
        assert {e["auth"] for e in cand.requests("/chat/completions")} == {f"Bearer {CANDIDATE_KEY}"}
    report = qc("report", str(out))
    assert report.returncode in (0, 1), report.stderr
    files = [f for f in out.rglob("*") if f.is_file()]
    assert {"run.sqlite", "summary.json", "shadow.json", "report.html", "signoff.md"} <= {f.name for f in files}
    haystacks = {str(f): f.read_bytes() for f in files}
    haystacks["proxy log"] = sp.log.read_bytes()
    haystacks["report output"] = (report.stdout + report.stderr).encode()
    for where, data in haystacks.items():
        for secret in (CALLER_KEY, CANDIDATE_KEY, BASELINE_KEY, *PII_FORMS):
            assert secret.encode() not in data, f"{secret!r} found in {where}"
    with RunStore.open(out) as store:
        cases = store.cases()
        period = (store.record(ShadowPeriods) or ShadowPeriods()).periods[0]
        texts = [r.text for r in store.responses()]
    assert len(cases) == len(PII) and all(c.route == "support" for c in cases)
    assert "<EMAIL_1>" in texts[0] and "<CARD_1>" in texts[0]
    assert set(period.redactions) == set(PII) and period.mode == mode


def test_keep_pii_stores_prompts_as_sent_but_never_a_key(tmp_path: Path) -> None:
    with TestServer(default="ok") as base, TestServer(default="ok") as cand:
        out = tmp_path / "run"
        with shadow_process(
            tmp_path, "--baseline", base.url, "--candidate", cand.url, "--out", str(out), "--keep-pii", "--sample", "1"
        ) as sp:
            call(sp.url, "/v1/chat/completions", chat(f"mail {PII['email']}"), headers={"Authorization": f"Bearer {CALLER_KEY}"})
            sp.wait_metric("qc_shadow_stored_total", 1.0)
            sp.proc.send_signal(signal.SIGTERM)
            sp.proc.wait(120)
    data = b"".join(f.read_bytes() for f in out.rglob("*") if f.is_file())
    assert PII["email"].encode() in data and CALLER_KEY.encode() not in data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "nonsense"], "--listen: expected HOST:PORT"),
        (["--sample", "2"], "shadow.sample"),
        (["--rotate-every", "5x"], "shadow.rotate_every"),
        (["--max-inflight", "0"], "shadow.max_inflight"),
    ],
)
def test_bad_flags_exit_2_with_the_field_named(tmp_path: Path, args: list[str], message: str) -> None:
    base = [
        "--listen",
        "127.0.0.1:0",
        "--baseline",
        "http://127.0.0.1:9",
        "--candidate",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path / "o"),
    ]
    r = qc("shadow", *base, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_a_tag_header_that_carries_credentials_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("shadow:\n  tag_headers: {Authorization: user}\n", encoding="utf-8")
    r = qc(
        "shadow",
        "-c",
        str(cfg),
        "--listen",
        "127.0.0.1:0",
        "--baseline",
        "http://x:1",
        "--candidate",
        "http://x:2",
        "--out",
        str(tmp_path / "o"),
    )
    assert r.returncode == 2 and "shadow.tag_headers" in r.stderr and "credentials" in r.stderr


def test_a_folder_holding_another_run_is_refused_before_listening(tmp_path: Path) -> None:
    RunStore.create(tmp_path / "taken", {"suite_fingerprint": "abc", "targets": {}, "repeats": 1}, []).close()
    r = qc(
        "shadow",
        "--listen",
        "127.0.0.1:0",
        "--baseline",
        "http://127.0.0.1:9",
        "--candidate",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path / "taken"),
    )
    assert r.returncode == 2 and "holds a different run" in r.stderr and "listening" not in r.stderr


def test_a_stalled_or_killed_mirror_process_never_touches_the_callers(tmp_path: Path) -> None:
    """The mirror side stopped (SIGSTOP), then killed mid-run (SIGKILL): every caller gets the baseline's bytes throughout."""
    with TestServer(default="a b c d", itl_s=0.0) as base, TestServer(default="a b c d") as cand:
        out = tmp_path / "run"
        with shadow_process(tmp_path, "--baseline", base.url, "--candidate", cand.url, "--out", str(out), "--sample", "1") as sp:
            mirror = sp.mirror_pid
            body = chat("the same question", stream=True, temperature=0)
            direct = call(base.url, "/v1/chat/completions", body)[::2]  # status and bytes (the Date header ticks)
            for _ in range(3):
                assert call(sp.url, "/v1/chat/completions", body)[::2] == direct
            sp.wait_metric("qc_shadow_stored_total", 3.0)
            # the same priority (SINK_MIRROR_NICENESS says why only the sink's is lowered)
            assert os.getpriority(os.PRIO_PROCESS, mirror) == os.getpriority(os.PRIO_PROCESS, sp.proc.pid)
            os.kill(mirror, signal.SIGSTOP)  # stalled: the hand-off only fills a buffer
            try:
                for _ in range(5):
                    assert call(sp.url, "/v1/chat/completions", body)[::2] == direct
                status, _, raw = call(sp.url, "/qc/ready")  # answered by the listening process alone, at once
                assert status == 200 and json.loads(raw)["status"] == "ready"
            finally:
                os.kill(mirror, signal.SIGCONT)
            sp.wait_metric("qc_shadow_stored_total", 8.0)  # it catches up: nothing handed over was lost
            base.itl_s = 0.2
            results: list[Any] = []
            threads = [stream_in_thread(sp.url, chat(f"in flight {i}", stream=True, temperature=0), results) for i in range(2)]
            deadline = time.monotonic() + 20
            while len(base.requests("/chat/completions")) < 11 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(mirror, signal.SIGKILL)  # mid-run, with two answers streaming
            for t in threads:
                t.join(30)
            base.itl_s = 0.0
            for _ in range(3):
                assert call(sp.url, "/v1/chat/completions", body)[::2] == direct
            status, _, raw = call(sp.url, "/qc/health")
            assert status == 503 and json.loads(raw)["status"] == "mirror_down"
            # the recording is down, the proxy is not: a probe on /qc/ready keeps it in the callers' path
            status, _, raw = call(sp.url, "/qc/ready")
            assert status == 200 and json.loads(raw)["status"] == "ready"
            assert sp.metric("qc_shadow_dropped_total", reason="mirror_down") == 3.0
            sp.proc.send_signal(signal.SIGTERM)
            code = sp.proc.wait(60)
    assert [r[0] for r in results] == [200, 200] and all(b"[DONE]" in r[2] for r in results)
    log = sp.log.read_text()
    assert code == 3 and "the mirror process" in log and "is gone" in log, log
    with RunStore.open(out) as store:
        assert store.case_count() == 8


def test_a_sinks_mirror_process_yields_the_cpu_to_the_answers(tmp_path: Path) -> None:
    """SINK_MIRROR_NICENESS: the gateway's answers run first."""
    if os.getpriority(os.PRIO_PROCESS, 0) >= 19:
        pytest.skip("run at niceness 19: a mirror process cannot be lowered further, so the check could not fail")
    with TestServer(default="ok") as base, TestServer(default="ok") as cand:
        args = ("--sink", "--sample", "1", "--baseline", base.url, "--candidate", cand.url, "--out", str(tmp_path / "run"))
        with shadow_process(tmp_path, *args) as sp:
            listening = os.getpriority(os.PRIO_PROCESS, sp.proc.pid)
            assert os.getpriority(os.PRIO_PROCESS, sp.mirror_pid) == min(19, listening + 10)
            assert call(sp.url, "/v1/chat/completions", chat("mirrored", temperature=0))[0] == 204
            sp.wait_metric("qc_shadow_stored_total", 1.0)


def test_a_port_in_use_is_refused_with_exit_2_and_the_mirror_process_ends(tmp_path: Path) -> None:
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        args = ["--listen", f"127.0.0.1:{port}", "--baseline", "http://127.0.0.1:9", "--candidate", "http://127.0.0.1:9"]
        r = qc("shadow", *args, "--out", str(tmp_path / "o"))
    finally:
        taken.close()
    assert r.returncode == 2 and f"--listen 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # the mirror process was told to stop and closed its folder (not left to die with its parent), and its end is not
    # reported as a crash
    assert "closed (stopped)" in r.stderr and "is gone" not in r.stderr, r.stderr


def test_a_mirror_process_that_never_opens_its_folder_is_stopped_and_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from qualitycheck.shadow import _handoff

    monkeypatch.setattr(_handoff, "_CHILD", "import time; time.sleep(600)")
    monkeypatch.setattr(_handoff, "START_TIMEOUT_S", 1.0)
    handoff = _handoff.ProcessHandoff(
        ShadowSettings.of_config(shadow_config("http://127.0.0.1:9", "http://127.0.0.1:9")),
        tmp_path / "o",
        "{}",
        replica="r",
        listen="127.0.0.1:0",
        log=lambda _: None,
    )
    with pytest.raises(_handoff.MirrorStartError, match=r"did not open its folder and scrape both targets' /metrics within 1s"):
        asyncio.run(handoff.start())
    assert handoff._proc is not None and handoff._proc.poll() is not None  # stopped, not left sleeping


def test_a_stalled_mirror_process_fills_a_bounded_hand_off_and_the_rest_is_counted(tmp_path: Path) -> None:
    """Requests of 512 KiB while the mirror process is stopped: past the hand-off's bound they are not mirrored, and counted."""
    with TestServer(default="ok") as base, TestServer(default="ok") as cand:
        out = tmp_path / "run"
        with shadow_process(tmp_path, "--baseline", base.url, "--candidate", cand.url, "--out", str(out), "--sample", "1") as sp:
            mirror = sp.mirror_pid
            big = "x" * 2**19
            os.kill(mirror, signal.SIGSTOP)
            try:
                for i in range(60):  # 30 MiB: past the 16 MiB the hand-off holds, whatever the socket's own buffers take
                    assert call(sp.url, "/v1/chat/completions", chat(f"{i} {big}"))[0] == 200
            finally:
                os.kill(mirror, signal.SIGCONT)
            sp.wait_metric("qc_shadow_requests_total", 60.0, endpoint="chat")
            dropped = sp.metric("qc_shadow_dropped_total", reason="handoff_full")
            assert 0 < dropped < 60
            sp.wait_metric("qc_shadow_stored_total", 60.0 - dropped)
            sp.proc.send_signal(signal.SIGTERM)
            assert sp.proc.wait(120) in (0, 1), sp.log.read_text()


def test_the_mirror_process_is_started_with_the_shadows_settings_not_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the mirror side reads (targets, timeout, noise floor, the `shadow` block) and its folders' header: never the judge's key."""
    import asyncio

    from qualitycheck.core._config import JudgeTarget
    from qualitycheck.shadow import _handoff

    sent = tmp_path / "args.json"
    monkeypatch.setattr(_handoff, "_CHILD", f"import pathlib, sys; pathlib.Path({str(sent)!r}).write_text(sys.stdin.read())")
    judge = JudgeTarget(url="http://127.0.0.1:9", model="j", headers={"X-Judge-Key": "judge-secret-7f3a"})
    cfg = shadow_config("http://127.0.0.1:9", "http://127.0.0.1:9").model_copy(update={"judge": judge})
    handoff = _handoff.ProcessHandoff(
        ShadowSettings.of_config(cfg), tmp_path / "o", "{}", replica="r", listen="127.0.0.1:0", log=lambda _: None
    )
    with pytest.raises(_handoff.MirrorStartError, match="ended at start"):
        asyncio.run(handoff.start())
    text = sent.read_text()
    args = json.loads(text)
    assert set(args) == {"settings", "rules", "out", "replica", "listen"}
    settings = json.loads(args["settings"])
    assert set(settings) == {"baseline", "candidate", "timeout_s", "noise_floor", "shadow", "folder"}
    assert set(settings["folder"]) == {"manifest", "config"}  # stored in each folder as given, never read as a config
    assert "judge-secret-7f3a" not in text and settings["folder"]["config"]["judge"]["headers"] == {"X-Judge-Key": "<redacted>"}
