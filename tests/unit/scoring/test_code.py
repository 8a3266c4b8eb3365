"""unit_tests in the sandbox: real MBPP tasks, off-by-one answers, and hostile code.

Every hostile row must be contained (the host stays untouched) and scored as
a failed test, not as an error and never as a pass.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.scoring import build_scorers
from qualitycheck.scoring._sandbox import isolation

from .conftest import check_row, load_rows

FAKE_SECRET = "sk-qualitycheck-test-secret-do-not-leak"


@pytest.fixture(autouse=True)
def secret_in_parent_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox must not inherit what the scoring process has."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_SECRET)
    monkeypatch.setenv("HF_TOKEN", FAKE_SECRET)


def _in_another_processs_sandbox(pid: int) -> bool:
    """Is `pid` inside a sandbox run started by another process (a parallel pytest worker, another user)?

    Every sandboxed process descends from an `unshare` started by the
    scoring process. One whose `unshare` is not ours belongs to a run that
    is still going elsewhere; one with no `unshare` above it (reparented to
    the host's init: escaped) or below one of ours still counts.
    """

    def parent(p: int) -> int:
        return int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])

    try:
        p = pid
        for _ in range(256):
            up = parent(p)
            if up <= 1:
                return False
            if Path(f"/proc/{up}/cmdline").read_bytes().split(b"\0")[0].rsplit(b"/", 1)[-1] == b"unshare":
                return parent(up) != os.getpid()
            p = up
    except (OSError, ValueError, IndexError):
        return False
    return False


def _nobody_processes() -> list[str]:
    """Processes running as nobody (the sandbox's uid), as 'pid state cmdline'; kernel teardown may lag a moment.

    Only this process's runs count: sandboxes of parallel test workers run as nobody too.
    """
    for _ in range(50):
        out = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    if p.stat().st_uid == 65534 and not _in_another_processs_sandbox(int(p.name)):
                        state = (p / "stat").read_text().split(") ")[1].split()[0]
                        out.append(f"{p.name} {state} {(p / 'cmdline').read_bytes()[:80]!r}")
                except OSError:
                    continue
        if not out:
            break
        time.sleep(0.05)
    return out


@pytest.mark.parametrize("row", load_rows("code.jsonl"))
def test_unit_tests(row: dict[str, Any]) -> None:
    scores = check_row(row)
    s = scores["unit_tests"]
    assert FAKE_SECRET not in str(s.detail)
    if isolation()["level"] == "namespaces" and "isolation" in s.detail:
        assert s.detail["isolation"] == "namespaces" and s.detail["sandbox"]["uid"] == "nobody"
        assert _nobody_processes() == [], "a sandboxed process outlived its run"
    assert not Path("/work/main/SANDBOX_ESCAPE.txt").exists()


def test_output_is_capped_and_secret_never_printed() -> None:
    case = Case(
        id="c",
        category="code",
        prompt="p",
        checks={"unit_tests": {"tests": "import os\nprint(os.environ.get('OPENAI_API_KEY'))\nprint('x' * 200000)\nassert False, 'shown'"}},
    )
    out = build_scorers(case)[0].score(Response(case_id="c", target="candidate", fingerprint="f", text="x = 1"), None)
    assert out.status == "fail" and out.detail["failed"]["error"] == "AssertionError: shown"
    assert FAKE_SECRET not in out.detail["stdout"] and "None" in out.detail["stdout"]
    assert len(out.detail["stdout"]) <= 2000


@pytest.mark.skipif(isolation()["level"] == "none", reason="no network namespace on this host")
def test_cannot_reach_a_server_on_the_hosts_localhost() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    code = f"import socket\n\ndef call():\n    socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
    case = Case(id="c", category="code", prompt="p", checks={"unit_tests": {"tests": "call()", "timeout_s": 3}})
    out = build_scorers(case)[0].score(Response(case_id="c", target="candidate", fingerprint="f", text=code), None)
    srv.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing is waiting in the backlog: the sandbox never connected
        srv.accept()
    srv.close()
    assert out.status == "fail"
    assert "Errno" in out.detail["failed"]["error"]


def test_runs_in_parallel_up_to_the_cores(tmp_path: Path) -> None:
    """Two sleeping answers on two workers take about one sleep, not two (3 s each: 2 s of slack for a busy machine's start-up)."""
    from qualitycheck.core._store import RunStore
    from qualitycheck.scoring import score_store

    code = "import time\n\ndef nap():\n    time.sleep(3.0)\n    return 1\n"
    cases = [Case(id=f"c{i}", category="code", prompt="p", checks={"unit_tests": {"tests": "assert nap() == 1"}}) for i in range(2)]
    store = RunStore.create(tmp_path, {"suite_fingerprint": "x", "targets": {}, "repeats": 1}, cases)
    for c in cases:
        store.put_response(Response(case_id=c.id, target="baseline", fingerprint="f", text=code))

    t0 = time.monotonic()
    assert score_store(store, workers=2) == 2
    assert time.monotonic() - t0 < 5.0  # one after the other: 6 s
    assert {s.status for s in store.scores()} == {"pass"}
    store.close()
    assert os.environ["OPENAI_API_KEY"] == FAKE_SECRET


def test_a_fork_bomb_does_not_starve_a_run_beside_it(tmp_path: Path) -> None:
    """Runs in parallel each have their own process budget (pids cgroup), not one per-uid pool."""
    from qualitycheck.core._store import RunStore
    from qualitycheck.scoring import score_store

    bomb = "import os, time\n\ndef go():\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            time.sleep(0.01)\n"
    good = "import time, subprocess\n\ndef go():\n    time.sleep(0.5)\n    return subprocess.run(['true']).returncode\n"
    cases = [
        Case(id="bomb", category="code", prompt="p", checks={"unit_tests": {"tests": "go()", "timeout_s": 2}}),
        Case(id="good", category="code", prompt="p", checks={"unit_tests": {"tests": "assert go() == 0", "timeout_s": 5}}),
    ]
    store = RunStore.create(tmp_path, {"suite_fingerprint": "x", "targets": {}, "repeats": 1}, cases)
    store.put_response(Response(case_id="bomb", target="baseline", fingerprint="f", text=bomb))
    store.put_response(Response(case_id="good", target="baseline", fingerprint="f", text=good))
    score_store(store, workers=2)
    got = {s.case_id: s for s in store.scores()}
    store.close()
    assert got["bomb"].status == "fail" and got["bomb"].detail["timeout"] is True
    assert got["good"].status == "pass", got["good"].detail
    assert _nobody_processes() == []
