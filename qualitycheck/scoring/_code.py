"""`unit_tests`: the answer's code run with the case's tests, in the sandbox.

The code is the first fenced Python block (the one defining the entry point
when several do), else the whole answer. `setup`, the code and the tests run
as three files in one namespace, in that order, under a harness that reports
which part failed, on which line, with which source text. The namespace is
named `answer`, not `__main__`, so demo code under `if __name__ ==
"__main__":` (often reading input()) does not run. A program that ends
before the tests finish (sys.exit, os._exit, a kill) fails: only the
harness's own report after the last test counts as a pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.scoring._base import CheckSpec, Outcome, Scorer, check_family
from qualitycheck.scoring._extract import fences
from qualitycheck.scoring._sandbox import Limits, run_python

__all__ = ["UnitTestsCheck", "UnitTestsScorer", "extract_code"]


class UnitTestsCheck(CheckSpec):
    """The answer's code with `tests` run after it, in the sandbox."""

    language: Literal["python"] = "python"
    tests: str
    entry_point: str | None = None
    setup: str = ""
    """Code run before the answer (imports the tests need)."""
    timeout_s: float = 10.0


_PY_LANGS = {"python", "py", "python3", "py3", ""}

# Runs inside the sandbox. Reads all three files before running any of them
# (the answer could rewrite tests.py), then reports on the fd given last.
HARNESS = r"""
import json, os, sys, traceback
fd = int(sys.argv[-1])
entry = sys.argv[1] if len(sys.argv) > 2 else ""
parts = [("setup", "setup.py"), ("answer", "answer.py"), ("tests", "tests.py")]
sources = {}
for _, name in parts:
    with open(name, encoding="utf-8") as f:
        sources[name] = f.read()

main_pid = os.getpid()

def report(d):
    if os.getpid() != main_pid:  # a forked child of the answer: only the harness reports
        os._exit(1)
    os.write(fd, json.dumps(d).encode())
    os.close(fd)

def where(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in sources]
    if isinstance(exc, SyntaxError) and exc.filename in sources:
        return {"file": exc.filename, "line": exc.lineno, "text": (exc.text or "").strip()}
    if not frames:
        return {}
    f = frames[-1]
    lines = sources[f.filename].splitlines()
    text = lines[f.lineno - 1].strip() if f.lineno and f.lineno <= len(lines) else ""
    return {"file": f.filename, "line": f.lineno, "text": text}

ns = {"__name__": "answer", "__builtins__": __builtins__}
part = "setup"
try:
    for part, name in parts:
        if part == "tests" and entry and entry not in ns:
            report({"status": "fail", "part": "answer", "error": "the answer does not define %s" % entry})
            os._exit(0)
        exec(compile(sources[name], name, "exec"), ns)
except SystemExit as exc:
    report({"status": "fail", "part": part, "error": "SystemExit(%r) before the tests finished" % (exc.code,), **where(exc)})
except BaseException as exc:
    report({"status": "fail", "part": part, "error": ("%s: %s" % (type(exc).__name__, exc))[:500], **where(exc)})
else:
    report({"status": "pass"})
"""


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*=", code, re.MULTILINE) is not None


def extract_code(text: str, entry_point: str | None = None) -> tuple[str, str]:
    """(code, where): where is "fenced" or "whole"."""
    blocks = [f.body for f in fences(text) if f.lang in _PY_LANGS]
    if entry_point:
        for b in blocks:
            if _defines(b, entry_point):
                return b, "fenced"
    if blocks:
        return blocks[0], "fenced"
    return text, "whole"


class UnitTestsScorer:
    """Pass when setup + code + tests run to the end in the sandbox."""

    check = "unit_tests"

    def __init__(self, spec: UnitTestsCheck, limits: Limits | None = None):
        self.spec = spec
        self.limits = limits or Limits(wall_s=spec.timeout_s)

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        code, where = extract_code(answer.text, self.spec.entry_point)
        if not code.strip():
            return Outcome("fail", False, {"error": "no code in the answer", "extracted_from": where})
        files = {"setup.py": self.spec.setup, "answer.py": code, "tests.py": self.spec.tests, "harness.py": HARNESS}
        argv = ["harness.py", *([self.spec.entry_point] if self.spec.entry_point else [])]
        r = run_python(files, argv, self.limits, trusted_main=True)  # harness.py is ours: compiled once per server
        detail: dict[str, Any] = {
            "extracted_from": where,
            "isolation": r.isolation,
            "isolation_weak": r.isolation == "none",
            "sandbox": r.isolation_detail,
            "wall_s": r.wall_s,
            "timeout_s": self.limits.wall_s,
        }
        if r.stdout:
            detail["stdout"] = r.stdout[:2000]  # the start: what the program printed before it went wrong
        if r.stderr:
            detail["stderr"] = r.stderr[-2000:]  # the end: the traceback
        rep = r.report or {}
        if rep.get("status") == "sandbox_error":
            raise RuntimeError(f"the sandbox could not start: {rep.get('reason')}")
        if r.timed_out:
            return Outcome("fail", False, {**detail, "timeout": True, "error": f"killed after {self.limits.wall_s:g} s wall time"})
        if rep.get("status") == "pass":
            return Outcome("pass", True, detail)
        if rep:
            failed = {k: rep[k] for k in ("part", "file", "line", "text", "error") if k in rep}
            detail["failed"] = failed
            detail["error"] = rep.get("error", "")
            if failed.get("part") == "tests" and str(rep.get("error", "")).startswith("AssertionError"):
                detail["assertion"] = failed.get("text", "")
        else:
            detail["error"] = f"the program ended before the tests finished (exit code {r.exit_code})"
            detail["exit_code"] = r.exit_code
        return Outcome("fail", False, detail)


@check_family("unit_tests", spec=UnitTestsCheck, names=("unit_tests",))
def unit_tests_family(spec: UnitTestsCheck, case: Case) -> Sequence[Scorer]:
    return [UnitTestsScorer(spec)]
