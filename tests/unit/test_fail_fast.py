"""A misconfigured target stops the run within seconds (exit 3), naming the target, the status and the server's message."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualitycheck.cli import main
from qualitycheck.core._records import ErrorInfo, Response
from qualitycheck.core._store import RunStore
from qualitycheck.generation._runner import FAIL_FAST_ANSWERS, _FailFast
from qualitycheck.testserver import Fault, TestServer
from tests.helpers import qa_cases, run_argv, write_suite


def _args(b: TestServer, c: TestServer, suite: Path, out: Path) -> list[str]:
    return run_argv(b.url, c.url, suite, out, "--concurrency", "4")


def test_a_target_refusing_every_request_alike_stops_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(200))
    out = tmp_path / "run"
    with TestServer() as b, TestServer(model="other-model", strict_model=True) as c:
        assert main(_args(b, c, suite, out)) == 3
        sent = len(c.log)
    err = capsys.readouterr().err
    assert "the candidate target answered its first 20 requests with HTTP 404" in err
    assert "The model `test-model` does not exist." in err
    assert sent < 60, f"{sent} requests were sent to a target that refused all of them"
    with RunStore.open(out) as store:  # what arrived is kept, and a rerun resumes
        counts = store.count_responses()
    assert counts["candidate"]["errors"] >= FAIL_FAST_ANSWERS
    assert counts["baseline"]["requests"] >= 1  # the baseline's answers that completed before the stop (in-flight ones are cancelled)


def test_an_occasional_refusal_does_not_stop_the_run(tmp_path: Path) -> None:
    """Only a target refusing its first answers all alike is misconfigured; one success clears it for good."""
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(30))
    # qa-3 alone is answered: three refusals before it, 26 after (more than FAIL_FAST_ANSWERS, had it only reset a count)
    faults = [Fault(kind="status", status=404, times=None, match=f"question qa {i}?") for i in range(30) if i != 3]
    with TestServer() as b, TestServer(faults=faults) as c:  # one at a time: the answers come in case order, whatever the timing
        assert main(run_argv(b.url, c.url, suite, tmp_path / "run", "--concurrency", "1")) in (0, 1)


def _refusal(target: str, status: int) -> Response:
    return Response(
        case_id="x", target=target, fingerprint="f", error=ErrorInfo(kind="http_status", status=status, message=f"HTTP {status}: no")
    )


def test_fail_fast_needs_the_same_non_retryable_status_every_time() -> None:
    ff = _FailFast()
    assert all(ff.refused(_refusal("candidate", 401)) is None for _ in range(FAIL_FAST_ANSWERS - 1))
    assert "HTTP 401" in (ff.refused(_refusal("candidate", 401)) or "")
    mixed = _FailFast()
    assert all(mixed.refused(_refusal("candidate", 404)) is None for _ in range(5))
    assert mixed.refused(_refusal("candidate", 401)) is None  # another status: not one misconfiguration
    assert all(mixed.refused(_refusal("candidate", 401)) is None for _ in range(3 * FAIL_FAST_ANSWERS))
    retryable = _FailFast()
    assert all(retryable.refused(_refusal("baseline", 503)) is None for _ in range(3 * FAIL_FAST_ANSWERS))


def test_a_model_name_the_target_does_not_serve_is_refused_before_generation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "s.jsonl", qa_cases(3))
    with TestServer(model="smol") as b, TestServer(model="smol-ngram") as c:
        rc = main(
            ["run", "--baseline", b.url, "--candidate", c.url, "--model", "smol", "--suite", str(suite), "--out", str(tmp_path / "run")]
        )
        sent = len(b.log) + len(c.log)
    assert rc == 2
    err = capsys.readouterr().err
    assert f"candidate.model: {c.url} does not serve 'smol'; it serves 'smol-ngram'" in err
    assert "baseline.model" not in err and "Traceback" not in err
    assert sent == 0 and not (tmp_path / "run" / "run.sqlite").exists()
