"""Families of installed packages, through the real entry-point path (importlib.metadata reading a .dist-info).

Each test runs in a subprocess with tests/checkpkg on PYTHONPATH, so the
test process's own registry never sees the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import write_suite

REPO = Path(__file__).resolve().parents[3]
CHECKPKG = REPO / "tests" / "checkpkg"


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKPKG), str(REPO)])}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_an_installed_family_is_loaded_on_first_use_validated_and_scored(tmp_path: Path) -> None:
    f = write_suite(
        tmp_path / "s.jsonl", [{"id": "a", "category": "qa", "prompt": "p", "checks": {"shout": {"min_exclamations": 2}, "contains": "hi"}}]
    )
    proc = _python(
        f"""
import json, sys
from qualitycheck.core import Response, check_registry, load_suite
from qualitycheck.scoring import score_case
assert "shout" not in [fam.key for fam in check_registry.families()]   # not loaded before a case names it
[case] = load_suite([{str(f)!r}])
fam = check_registry.get("shout")
rs = [Response(case_id="a", target=t, repeat=0, fingerprint="f", text=x) for t, x in (("baseline", "hi!!"), ("candidate", "hi!"))]
print(json.dumps({{"names": case.check_names(), "origin": fam.origin, "module": sys.modules[fam.build.__module__].__file__,
                  "scores": [[s.target, s.check, s.status] for s in score_case(case, rs)]}}))
""",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["names"] == ["contains", "shout"] and got["origin"] == "qc_shout_checks.shout"
    assert got["module"] == str(CHECKPKG / "qc_shout_checks" / "__init__.py")
    assert got["scores"] == [
        ["baseline", "contains", "pass"],
        ["baseline", "shout", "pass"],
        ["candidate", "contains", "pass"],
        ["candidate", "shout", "fail"],
    ]


def test_a_broken_entry_point_is_a_problem_naming_it_not_a_traceback(tmp_path: Path) -> None:
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "category": "qa", "prompt": "p", "checks": {"broken": {}}},
            {"id": "b", "category": "qa", "prompt": "p", "checks": {"empty": {}}},
            {"id": "c", "category": "qa", "prompt": "p", "checks": {"shot": {}}},
            {"id": "d", "category": "qa", "prompt": "p", "checks": {"broken": True}},
        ],
    )
    proc = _python(f"import sys; from qualitycheck.cli import main; sys.exit(main(['validate', {str(f)!r}]))", tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    where = "in group 'qualitycheck.checks' (package qc-shout-checks 0.1)"
    assert lines[1].startswith(
        f"{f}:2: checks.empty: entry point 'empty' = 'json' {where} loaded, but declares no "
        "check family 'empty' (declared: exact, regex, contains, json, "
    ), proc.stderr
    assert lines[:1] + lines[2:] == [
        f"{f}:1: checks.broken: entry point 'broken' = 'qc_shout_checks_missing_module' {where} failed to load: "
        "ModuleNotFoundError: No module named 'qc_shout_checks_missing_module'",
        f"{f}:3: checks.shot: unknown key (did you mean 'shout'?)",
        f"{f}:4: checks.broken: entry point 'broken' = 'qc_shout_checks_missing_module' {where} failed to load: "
        "ModuleNotFoundError: No module named 'qc_shout_checks_missing_module'",
    ], proc.stderr
