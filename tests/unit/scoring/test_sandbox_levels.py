"""The weaker isolation levels still run answers correctly and say that they are weaker."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.core._store import RunStore
from qualitycheck.scoring import _sandbox, build_scorers, score_store

ADD = "def add(a, b):\n    return a + b\n"
ENV = "import os\n\ndef names():\n    return sorted(os.environ)\n"


def _force(monkeypatch: pytest.MonkeyPatch, level: str) -> dict[str, Any]:
    real = _sandbox.isolation()
    if level == "user-namespaces":
        forced = {
            **real,
            "level": level,
            "unshare": ["unshare", "--user", "--map-root-user", *_sandbox._UNSHARE_NS],
            "drop_to_nobody": False,
            "program_python": _sandbox._unmasked_python(_sandbox.sys.executable),
            "cgroups": [],
            "weak": False,
        }
        if not _sandbox._works([*forced["unshare"], "--", "true"]):
            pytest.skip("user namespaces are not available here")
    else:
        forced = {
            **real,
            "level": "none",
            "unshare": None,
            "drop_to_nobody": False,
            "program_python": _sandbox.sys.executable,
            "weak": True,
        }
    monkeypatch.setattr(_sandbox, "_probed", forced)
    return forced


def _score(text: str, tests: str, timeout: float = 5) -> Any:
    case = Case(id="c", category="code", prompt="p", checks={"unit_tests": {"tests": tests, "timeout_s": timeout}})
    return build_scorers(case)[0].score(Response(case_id="c", target="candidate", fingerprint="f", text=text), None)


@pytest.mark.parametrize("level", ["user-namespaces", "none"])
def test_weaker_levels_pass_good_code_fail_bad_code_and_scrub_env(monkeypatch: pytest.MonkeyPatch, level: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    _force(monkeypatch, level)
    good = _score(ADD, "assert add(2, 3) == 5")
    assert good.status == "pass" and good.detail["isolation"] == level
    assert good.detail["isolation_weak"] is (level == "none")
    assert _score(ADD, "assert add(2, 2) == 5").status == "fail"
    assert _score(ENV, "assert names() == ['HOME', 'LANG', 'PATH', 'TMPDIR'], names()").status == "pass"
    spin = _score("def spin():\n    while True:\n        pass\n", "spin()", timeout=1)
    assert spin.status == "fail" and spin.detail["timeout"] is True


def test_user_namespaces_still_have_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    _force(monkeypatch, "user-namespaces")
    net = _score("import socket\n\ndef f():\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n", "f()")
    assert net.status == "fail" and "Network is unreachable" in net.detail["failed"]["error"]


def test_score_store_warns_when_isolation_is_weak(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _force(monkeypatch, "none")
    case = Case(id="c", category="code", prompt="p", checks={"unit_tests": {"tests": "assert add(1, 1) == 2"}})
    store = RunStore.create(tmp_path, {"suite_fingerprint": "x", "targets": {}, "repeats": 1}, [case])
    store.put_response(Response(case_id="c", target="baseline", fingerprint="f", text=ADD))
    score_store(store)
    store.close()
    assert "WARNING: unit tests ran with weaker isolation" in capsys.readouterr().err


def test_an_interpreter_under_a_masked_dir_is_replaced_by_one_the_sandbox_can_see(tmp_path: Any) -> None:
    """A venv under /tmp (QC_HOME=/tmp/...) vanishes under the sandbox's private /tmp."""
    link = Path("/tmp") / f"qc-python-link-{os.getpid()}"
    link.symlink_to(sys.executable)
    try:
        got = _sandbox._unmasked_python(str(link))
        assert not _sandbox._masked(got) and Path(got).exists()
    finally:
        link.unlink()
    assert _sandbox._unmasked_python("/usr/bin/python3") == "/usr/bin/python3"
