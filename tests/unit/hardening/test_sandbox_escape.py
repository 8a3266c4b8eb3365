"""Sandbox escapes the scoring helper's suite does not try: the user's home, the parent, immortal sleepers.

tests/unit/scoring covers network, fork/memory bombs, disk fill, env
secrets and writes outside the sandbox. Here model-written code tries to
read a key planted in the real user's home, to kill the process that
scores it (and everything it can signal), and to outlive its run as a
detached daemon that ignores SIGTERM. Each must be a *failed* test whose
detail says why, with the host untouched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response, Score
from qualitycheck.scoring import score_case
from qualitycheck.scoring._sandbox import isolation

pytestmark = pytest.mark.skipif(isolation()["level"] == "none", reason="no namespaces on this host: the sandbox says it is weak")


def score(code: str, tests: str, timeout_s: float = 3) -> Score:
    case = Case(id="c1", category="code", prompt="p", checks={"unit_tests": {"tests": tests, "timeout_s": timeout_s}})
    r = Response(case_id="c1", target="baseline", fingerprint="f", text=f"```python\n{code}\n```")
    (s,) = [s for s in score_case(case, [r]) if s.check == "unit_tests"]
    return s


def processes_with(marker: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
            except OSError:
                continue
    return out


@pytest.fixture
def planted_key() -> Iterator[tuple[Path, str]]:
    """A private key file in the real home directory (removed afterwards)."""
    secret = f"-----BEGIN OPENSSH PRIVATE KEY----- qc-planted-{uuid.uuid4().hex}"
    folder = Path.home() / f".qc-hardening-{uuid.uuid4().hex[:8]}" / ".ssh"
    folder.mkdir(parents=True, mode=0o700)
    key = folder / "id_ed25519"
    key.write_text(secret)
    key.chmod(0o600)
    try:
        yield key, secret
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def test_reading_a_key_in_the_users_home_fails(planted_key: tuple[Path, str]) -> None:
    key, secret = planted_key
    code = (
        "import glob, os\n"
        "def steal():\n"
        f"    paths = [{str(key)!r}, os.path.expanduser('~/.ssh/id_ed25519')]\n"
        "    paths += glob.glob('/root/.ssh/*') + glob.glob('/home/*/.ssh/*') + glob.glob('/root/.qc-hardening-*/.ssh/*')\n"
        "    for p in paths:\n"
        "        try:\n"
        "            return open(p).read()\n"
        "        except OSError as exc:\n"
        "            last = exc\n"
        "    raise last\n"
    )
    s = score(code, "assert 'PRIVATE KEY' in steal()")
    assert s.status == "fail", s.detail
    assert secret not in str(s.detail) and "qc-planted" not in str(s.detail)
    assert "Error" in str(s.detail.get("failed") or s.detail), s.detail  # the reason (a PermissionError or no such file)
    assert key.read_text() == secret  # untouched


def test_killing_the_parent_and_everything_signalable_fails() -> None:
    canary = subprocess.Popen(["sleep", "30"])
    me = os.getpid()
    code = (
        "import os, signal\n"
        "def attack():\n"
        "    for pid in (os.getppid(), -1):  # whatever it can reach blindly\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        f"    os.kill({me}, signal.SIGKILL)  # the scoring process, by its host pid\n"
        f"    os.kill({canary.pid}, signal.SIGKILL)\n"
        "    return 'done'\n"
    )
    try:
        s = score(code, "assert attack() == 'done'")
        assert s.status == "fail", s.detail
        reason = str(s.detail.get("failed") or s.detail)
        assert "ProcessLookupError" in reason or "PermissionError" in reason, s.detail
        assert canary.poll() is None, "the sandbox killed a host process"
    finally:
        canary.kill()
        canary.wait()
    assert os.getpid() == me  # and we are still here to say so


def test_a_detached_sleeper_ignoring_sigterm_is_killed_with_the_run() -> None:
    marker = f"qc-immortal-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys, time\n"
        "def linger():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import signal, time\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\\n"
        f"time.sleep(10**6)  # {marker}'], start_new_session=True,\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "    time.sleep(10**6)\n"
    )
    t0 = time.monotonic()
    s = score(code, "linger()", timeout_s=1)
    assert s.status == "fail" and s.detail.get("timeout") is True, s.detail
    assert time.monotonic() - t0 < 30
    for _ in range(50):  # kernel teardown of the PID namespace may lag a moment
        if not processes_with(marker):
            break
        time.sleep(0.05)
    assert processes_with(marker) == [], "a sandboxed process outlived its run"
