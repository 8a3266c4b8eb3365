"""Paired runs end to end on the test server: store, resume, refusal, secrets, exit codes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._store import RunStore, load_run
from qualitycheck.testserver import Fault, TestServer
from tests.helpers import qa_cases, run_argv, write_suite


def run_args(b: TestServer, c: TestServer, suite: Path, out: Path, *extra: str) -> list[str]:
    return run_argv(b.url, c.url, suite, out, *extra, model="m")


def run_cli(b: TestServer, c: TestServer, suite: Path, out: Path, *extra: str) -> int:
    return main(run_args(b, c, suite, out, *extra))


def test_identical_pairs_pass_and_write_the_run_folder(tmp_path: Path, pair_servers: tuple[TestServer, TestServer]) -> None:
    b, c = pair_servers
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6) + qa_cases(4, "json"))
    assert run_cli(b, c, suite, tmp_path / "run") == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["format_version"] == 1 and s["verdict"] == "pass" and s["cases"] == 10
    assert s["targets"]["baseline"] == {"url": b.url, "model": "m"}
    assert s["categories"]["qa"]["cases"] == 6 and s["categories"]["qa"]["identical_rate"] == 1.0
    assert s["errors"]["candidate"]["count"] == 0
    frames = load_run(tmp_path / "run")
    assert len(frames["responses"]) == 20 and set(frames["responses"]["target"]) == {"baseline", "candidate"}
    assert set(frames["cases"]["category"]) == {"qa", "json"}


def test_divergent_pair_fails_and_is_counted_per_category(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(5, checks={"exact": True}) + qa_cases(3, "free"))
    with TestServer(default="same") as b, TestServer(default="same", answers={"qa 3?": "changed", "free 1?": "other"}) as c:
        assert run_cli(b, c, suite, tmp_path / "run", "--no-noise-floor") == 1  # one flip: counted only without a floor
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["verdict"] == "fail" and s["categories"]["qa"]["identical_rate"] == pytest.approx(0.8)
    assert s["categories"]["qa"]["checks"]["exact"]["regressions"] == ["qa-3"]
    # a text difference that no check can judge is not proof of a regression
    assert s["categories"]["free"]["verdict"] == "inconclusive"


def test_every_fault_kind_ends_stored_exactly_once(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(12))
    faults = [
        Fault("status", match="qa 0?", status=503, times=2),
        Fault("status", match="qa 1?", status=500, times=None),
        Fault("status", match="qa 2?", status=429, times=1, retry_after="0"),
        Fault("reset", match="qa 3?", times=1),
        Fault("reset", match="qa 4?", times=None),
        Fault("malformed", match="qa 5?", times=1),
        Fault("no_done", match="qa 6?", times=None),
        Fault("hang", match="qa 7?", times=None),
    ]
    with TestServer(default="a b c") as b, TestServer(default="a b c", faults=faults) as c:
        rc = run_cli(b, c, suite, tmp_path / "run", "--timeout", "1", "--retries", "2")
    assert rc == 1
    with RunStore.open(tmp_path / "run") as store:
        rows = list(store.responses())
    assert len(rows) == 24 and len({(r.case_id, r.target) for r in rows}) == 24
    failed = sorted(r.case_id for r in rows if not r.ok)
    assert failed == ["qa-1", "qa-4", "qa-6", "qa-7"]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    cand = s["errors"]["candidate"]
    assert {k: cand[k] for k in ("count", "requests", "rate")} == {"count": 4, "requests": 12, "rate": pytest.approx(4 / 12)}
    assert {k["kind"]: k["count"] for k in cand["kinds"]} == {"stream_cut": 2, "http_500": 1, "timeout": 1}  # why, by kind
    assert s["errors"]["baseline"]["count"] == 0


def test_resume_sends_only_what_is_missing_and_errors_again(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6))
    with TestServer(default="x") as b, TestServer(default="x", faults=[Fault("status", match="qa 2?", status=500, times=None)]) as c:
        assert run_cli(b, c, suite, tmp_path / "run", "--retries", "0") == 1
        assert len(b.requests("/chat/completions")) == 6
        c.faults.clear()
        assert run_cli(b, c, suite, tmp_path / "run", "--retries", "0") == 0
        # only the failed request is asked again; the baseline is not touched
        assert len(b.requests("/chat/completions")) == 6
        assert len(c.requests("/chat/completions")) == 7
        assert run_cli(b, c, suite, tmp_path / "run") == 0  # finished: nothing sent
        assert len(c.requests("/chat/completions")) == 7


def test_resume_refuses_other_suites_or_targets(
    tmp_path: Path, pair_servers: tuple[TestServer, TestServer], capsys: pytest.CaptureFixture[str]
) -> None:
    b, c = pair_servers
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    other = write_suite(tmp_path / "o.jsonl", qa_cases(4))
    assert run_cli(b, c, suite, tmp_path / "run") == 0
    capsys.readouterr()
    assert run_cli(b, c, other, tmp_path / "run") == 2
    assert "suites differ" in capsys.readouterr().err
    assert run_cli(c, b, suite, tmp_path / "run") == 2
    assert "targets differ" in capsys.readouterr().err


def test_kill_minus_nine_then_resume(tmp_path: Path) -> None:
    """A hard kill loses only in-flight requests; the rerun never re-asks a stored one."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(30))
    out = tmp_path / "run"
    with TestServer(default="slow answer", ttft_s=0.15) as b, TestServer(default="slow answer", ttft_s=0.15) as c:
        cmd = [sys.executable, "-m", "qualitycheck", *run_args(b, c, suite, out, "--concurrency", "2")]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        stored = 0
        while time.time() < deadline and stored < 10:
            time.sleep(0.1)
            try:
                with sqlite3.connect(out / "run.sqlite") as db:
                    stored = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
            except sqlite3.OperationalError:
                pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert 10 <= stored < 60, "the run should have been killed midway"
        with RunStore.open(out) as store:
            before = {(r.case_id, r.target) for r in store.responses()}
        sent_before = len(b.requests()) + len(c.requests())
        assert main(cmd[3:]) == 0
        again = [
            (e["body"]["messages"][0]["content"], s)
            for s, srv in (("baseline", b), ("candidate", c))
            for e in srv.requests("/chat/completions")[-1000:]
        ]
    with RunStore.open(out) as store:
        rows = list(store.responses())
    assert len(rows) == 60 and all(r.ok for r in rows)
    sent_after = len(b.requests()) + len(c.requests()) - sent_before
    assert sent_after <= 60 - len(before) + 4  # at most the in-flight ones were lost and re-sent
    recounted: dict[tuple[str, str], int] = {}
    for content, side in again:
        recounted[(content, side)] = recounted.get((content, side), 0) + 1
    for case_id, side in before:
        n = int(case_id.split("-")[1])
        assert recounted[(f"question qa {n}?", side)] == 1, f"{case_id}/{side} was requested again"


def test_secrets_never_reach_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("QC_SECRET_KEY", "sk-very-secret-123")
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    with TestServer() as b, TestServer() as c:
        cfg = tmp_path / "qualitycheck.yaml"
        cfg.write_text(
            f"baseline: {{url: '{b.url}', model: m, api_key_env: QC_SECRET_KEY, headers: {{X-Token: hdr-secret-456}}}}\n"
            f"candidate: {{url: '{c.url.replace('//', '//user:pw-secret-789@')}', model: m}}\n"
            f"suites: ['{suite}']\nrun: {{preflight: false}}\n",
            encoding="utf-8",
        )
        assert main(["run", "-c", str(cfg), "--out", str(tmp_path / "run")]) == 0
        assert b.requests("/chat/completions")[0]["auth"] == "Bearer sk-very-secret-123"
    captured = capsys.readouterr()
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert b"sk-very-secret-123" not in data and b"hdr-secret-456" not in data, f
            assert b"pw-secret-789" not in data, f
    assert "sk-very-secret-123" not in captured.out + captured.err
    assert "pw-secret-789" not in captured.out + captured.err


def test_config_problems_exit_2_with_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "qc.yaml"
    cfg.write_text("baseline:\n  url: localhost:8000\n  model: m\nrun:\n  concurrency: 0\n  colour: blue\n", encoding="utf-8")
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(1))
    assert main(["run", "-c", str(cfg), "--suite", str(suite)]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}:2: baseline.url: must start with http:// or https://" in err
    assert f"{cfg}:5: run.concurrency: Input should be greater than or equal to 1" in err
    assert f"{cfg}:6: run.colour: unknown key" in err
    assert main(["run", "--baseline", "http://x", "--model", "m", "--suite", str(suite)]) == 2
    assert "candidate: no candidate target" in capsys.readouterr().err
    assert main(["run", "--shard", "3/2", "--baseline", "http://x", "--candidate", "http://y", "--model", "m", "--suite", str(suite)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_ctrl_c_stops_cleanly_with_exit_3_and_keeps_what_arrived(tmp_path: Path) -> None:
    """Ctrl-C while requests are in flight: exit 3, the hint to resume, and what arrived stored.

    The signal is sent once the candidate holds a request it never answers
    (qa-2's): the run is then provably inside generation, whose handler turns
    Ctrl-C into cancelling the requests, and cannot end on its own first. A
    signal sent after some number of requests raced the run: those counted
    the preflight's, and under load the run could end before the signal.
    """
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(30))
    out = tmp_path / "run"
    held = Fault("hang", match="question qa 2?", times=None)
    with TestServer(default="slow") as b, TestServer(default="slow", faults=[held]) as c:
        cmd = [sys.executable, "-m", "qualitycheck", *run_args(b, c, suite, out, "--concurrency", "2")]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while not any(r["body"]["messages"][0]["content"] == "question qa 2?" for r in c.requests("/chat/completions")):
                assert proc.poll() is None, "the run ended before the held request arrived"
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 3, err
    assert "Run the same command again to resume" in err and "Traceback" not in err
    with RunStore.open(out) as store:
        stored = {(r.case_id, r.target) for r in store.responses()}
    assert {("qa-0", "baseline"), ("qa-0", "candidate")} <= stored or {("qa-1", "baseline"), ("qa-1", "candidate")} <= stored
    assert ("qa-2", "candidate") not in stored  # held until the interruption: never answered, never stored


def test_regressions_within_a_small_floors_allowance_are_undecided_not_passed(tmp_path: Path) -> None:
    """A small control that never disagreed cannot explain a regression: the route is undecided (exit 1), naming the case and why.

    Six A/A pairs do not rule out noise, so the allowance covers the
    regression; but a floor that saw no disagreement is no evidence that
    noise caused it. Passing it would be a pass from lack of evidence.
    """
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(6, checks={"contains": ["42"]}))
    with TestServer(default="42") as b, TestServer(default="42", answers={"qa 2?": "41"}) as c, TestServer(default="42") as k:
        rc = main(
            [
                "run",
                "--baseline",
                b.url,
                "--candidate",
                c.url,
                "--control",
                k.url,
                "--model",
                "m",
                "--suite",
                str(suite),
                "--out",
                str(tmp_path / "run"),
                "--no-preflight",
            ]
        )
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    cell = s["categories"]["qa"]["checks"]["contains"]
    assert cell["regressions"] == ["qa-2"] and cell["regression_allowance"] >= 1
    assert cell["tolerated"] == [], "a floor that never disagreed tolerates nothing: the regression is listed as one"
    (g,) = [g for g in s["guardrails"] if g["name"] == "max_quality_regression_cases"]
    assert g["passed"] is None and "qa-2 (contains)" in g["message"] and "too few pairs" in g["message"]
    assert "on 0 of 6 cases" in g["message"] and "--repeats" in g["message"]
    qa = s["categories"]["qa"]
    assert qa["verdict"] == "inconclusive" and "qa-2 not explained by the measured noise floor" in qa["verdict_reason"]
    assert "--control" in qa["would_decide"]
    assert s["verdict"] == "inconclusive" and rc == 1


def test_credentials_in_the_url_become_basic_auth_and_never_stay_in_the_url() -> None:
    from qualitycheck.core._config import Target

    t = Target(url="http://alice:s3cret@10.0.0.1:8000/v1", model="m")
    assert t.base_url == "http://10.0.0.1:8000/v1" and t.server_url == "http://10.0.0.1:8000"
    assert t.auth_headers()["Authorization"] == "Basic YWxpY2U6czNjcmV0"
    assert t.public_url == "http://alice:<redacted>@10.0.0.1:8000/v1"
    assert Target(url="http://h", model="m", headers={"authorization": "Token x"}).auth_headers() == {"authorization": "Token x"}


def test_a_preflight_mismatch_fails_the_gate_naming_the_check(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3, checks={"contains": ["42"]}))
    with TestServer(default="42") as b, TestServer(default="42", chat_template="[{role}] {content}\n") as c:
        rc = main(
            [
                "run",
                "--baseline",
                b.url,
                "--candidate",
                c.url,
                "--model",
                "test-model",
                "--suite",
                str(suite),
                "--out",
                str(tmp_path / "run"),
            ]
        )
        same = main(
            [
                "run",
                "--baseline",
                b.url,
                "--candidate",
                b.url,
                "--model",
                "test-model",
                "--suite",
                str(suite),
                "--out",
                str(tmp_path / "same"),
            ]
        )
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    (g,) = [g for g in s["guardrails"] if g["name"] == "preflight_consistent"]
    assert g["passed"] is False and g["observed"] == ["tokenize"] and "tokenize" in g["message"]
    assert s["verdict"] == "fail" and rc == 1
    ok = json.loads((tmp_path / "same" / "summary.json").read_text())
    assert [g["passed"] for g in ok["guardrails"] if g["name"] == "preflight_consistent"] == [True]
    assert same == 0


def test_generate_walks_a_reiterable_suite_and_counts_what_it_skips(tmp_path: Path) -> None:
    """`run` hands the runner a suite read again on each pass, never a list: counting, sending, resuming."""
    import asyncio

    from qualitycheck.core._cases import SuiteCases
    from qualitycheck.core._config import RunOptions, Target
    from qualitycheck.generation._runner import Progress, generate

    class Totals(Progress):
        def start(self, totals: dict[str, int]) -> None:
            self.totals = totals

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(5))
    cases = SuiteCases([suite])
    with TestServer() as b, TestServer() as c:
        targets = {"baseline": Target(url=b.url, model="m"), "candidate": Target(url=c.url, model="m")}
        opts = RunOptions(retries=0, preflight=False)
        with RunStore.create(tmp_path / "run", {"cases": 5, "targets": {}, "repeats": 1}, iter(cases)) as store:
            assert [x.id for x in store.iter_cases()] == [f"qa-{i}" for i in range(5)]
            first = asyncio.run(generate(store, SuiteCases([suite], keep=lambda x: x.id != "qa-3"), targets, opts))
            progress = Totals()
            rest = asyncio.run(generate(store, cases, targets, opts, progress=progress))
            again = asyncio.run(generate(store, cases, targets, opts))
    assert first.sent == {"baseline": 4, "candidate": 4} and first.skipped == 0
    assert rest.sent == {"baseline": 1, "candidate": 1} and rest.skipped == 8
    assert progress.totals == {"baseline": 1, "candidate": 1}
    assert again.sent == {} and again.skipped == 10
    assert len(c.requests("/chat/completions")) == 5


def test_a_store_slower_than_the_server_holds_back_new_pairs_instead_of_queueing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Received-but-uncommitted responses stay bounded: memory must not grow with the run when the disk lags."""
    import asyncio

    from qualitycheck.core._config import RunOptions, Target
    from qualitycheck.generation import _runner as runner

    monkeypatch.setattr(runner, "MAX_UNWRITTEN", 4)
    slow_put = RunStore.put_response

    def put_response(self: RunStore, r: object) -> None:
        time.sleep(0.005)
        slow_put(self, r)  # type: ignore[arg-type]

    monkeypatch.setattr(RunStore, "put_response", put_response)
    seen: list[int] = []
    put = runner._StoreWriter.put
    monkeypatch.setattr(runner._StoreWriter, "put", lambda self, r: (put(self, r), seen.append(self.backlog())))
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(40))
    from qualitycheck.core._cases import SuiteCases

    with TestServer() as b, TestServer() as c:
        targets = {"baseline": Target(url=b.url, model="m"), "candidate": Target(url=c.url, model="m")}
        opts = RunOptions(retries=0, preflight=False, concurrency=2)
        with RunStore.create(tmp_path / "run", {"cases": 40, "targets": {}, "repeats": 1}, iter(SuiteCases([suite]))) as store:
            stats = asyncio.run(runner.generate(store, SuiteCases([suite]), targets, opts))
            assert len(list(store.responses())) == 80
    assert stats.sent == {"baseline": 40, "candidate": 40}
    assert max(seen) <= 4 + 2 * 2 + 1, max(seen)  # the limit, plus what was in flight when it was reached


def test_generation_sends_the_stored_cases_even_if_the_suite_changes_meanwhile(
    tmp_path: Path, pair_servers: tuple[TestServer, TestServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is sent is what the manifest fingerprinted: the cases in the store, not the file as it is now."""
    b, c = pair_servers
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    create = RunStore.create

    def create_then_edit(*args, **kwargs):  # type: ignore[no-untyped-def]
        store = create(*args, **kwargs)
        write_suite(suite, [{**x, "messages": [{"role": "user", "content": "EDITED"}]} for x in qa_cases(3)])
        return store

    monkeypatch.setattr(RunStore, "create", create_then_edit)
    assert run_cli(b, c, suite, tmp_path / "run") == 0
    sent = [m["content"] for r in b.requests("/chat/completions") for m in r["body"]["messages"]]
    assert len(sent) == 3 and "EDITED" not in sent


def test_a_run_samples_the_dcgm_exporter_its_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`canary.dcgm_metrics` reaches generation, which reads no config of its own: a run's GPU samples hold the exporter's figures."""
    from aiohttp import web

    from qualitycheck.core._records import GpuSamples
    from qualitycheck.generation import _measure
    from tests.helpers import raw_server

    monkeypatch.setattr(_measure, "GPU_FIRST_SAMPLE_S", 0.0)  # the first sample at once: the run lasts well under a second

    async def dcgm(_: web.Request) -> web.Response:
        return web.Response(text='DCGM_FI_DEV_GPU_UTIL{gpu="0"} 87\nDCGM_FI_DEV_FB_USED{gpu="0"} 1024\n')

    suite = write_suite(tmp_path / "s.jsonl", qa_cases(4))
    config = tmp_path / "qualitycheck.yaml"
    with raw_server(dcgm) as exporter, TestServer(ttft_s=0.5) as b, TestServer(ttft_s=0.5) as c:
        config.write_text(f"canary:\n  dcgm_metrics: {exporter}/metrics\n", encoding="utf-8")
        assert run_cli(b, c, suite, tmp_path / "run", "-c", str(config)) == 0
    with RunStore.open(tmp_path / "run") as store:
        readings = [(s.side, s.gpu_utilization, s.gpu_memory_used_mib) for s in store.record_or_empty(GpuSamples).samples]
    assert ("candidate", 87.0, 1024.0) in readings, readings
