"""`python` checks: a user's function decides, its reason is kept, and a broken rule never passes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._cases import Case, load_suite
from qualitycheck.core._errors import SuiteError
from qualitycheck.core._records import Response, Score
from qualitycheck.core._store import RunStore
from qualitycheck.scoring import score_case, score_store
from qualitycheck.testserver import TestServer
from tests.helpers import write_suite

RULES = """
import re

def no_competitor(answer, case, args):
    found = [n for n in args["names"] if n.lower() in answer.lower()]
    if found:
        return False, "mentions " + ", ".join(found)
    return True

def plain(answer, case, args):
    return "ok" in answer

def with_reason(answer, case, args):
    return True, "looked at " + case.id

def raises(answer, case, args):
    return {}["missing"]

def exits(answer, case, args):
    raise SystemExit(3)

def returns_string(answer, case, args):
    return "yes"

def returns_triple(answer, case, args):
    return (True, "a", "b")

def returns_pair_without_text(answer, case, args):
    return (True, 7)

def mutates(answer, case, args):
    args["seen"] = args.get("seen", 0) + 1
    case.params["x"] = 1
    return args["seen"] == 1

def renames(answer, case, args):
    case.id = "other"
    return True

class Rules:
    @staticmethod
    def short(answer, case, args):
        return len(answer) <= args.get("max", 10)

NOT_CALLABLE = 3
"""


def _case(tmp_path: Path, *checks: dict[str, Any]) -> Case:
    (tmp_path / "my_rules.py").write_text(RULES, encoding="utf-8")
    f = write_suite(tmp_path / "s.jsonl", [{"id": "c1", "category": "qa", "prompt": "p", "checks": {"python": list(checks)}}])
    [case] = load_suite([f])
    return case


def _scores(case: Case, text: str) -> dict[str, Score]:
    r = Response(case_id=case.id, target="baseline", repeat=0, fingerprint="f", text=text)
    return {s.check: s for s in score_case(case, [r])}


def test_the_function_decides_and_its_reason_is_kept(tmp_path: Path) -> None:
    case = _case(
        tmp_path,
        {"name": "no_competitor", "function": "my_rules:no_competitor", "args": {"names": ["Acme", "Globex"]}},
        {"name": "plain", "function": "my_rules:plain"},
        {"name": "with_reason", "function": "my_rules:with_reason"},
        {"name": "short", "function": "my_rules:Rules.short", "args": {"max": 100}},
    )
    assert case.check_names() == ["no_competitor", "plain", "with_reason", "short"]
    bad = _scores(case, "Try Acme instead, ok?")
    assert (bad["no_competitor"].status, bad["no_competitor"].value) == ("fail", False)
    assert bad["no_competitor"].detail == {"function": "my_rules:no_competitor", "reason": "mentions Acme"}
    assert bad["plain"].status == "pass" and "reason" not in bad["plain"].detail
    assert bad["with_reason"].status == "pass" and bad["with_reason"].detail["reason"] == "looked at c1"
    assert bad["short"].status == "pass"
    good = _scores(case, "We have it.")
    assert good["no_competitor"].status == "pass" and good["plain"].status == "fail"


@pytest.mark.parametrize(
    ("function", "reason"),
    [
        ("raises", "my_rules:raises raised KeyError: 'missing'"),
        ("exits", "my_rules:exits raised SystemExit: 3"),
        ("returns_string", "returned 'yes' (str); expected a bool or a (bool, str) pair"),
        ("returns_triple", "returned (True, 'a', 'b') (tuple); expected a bool or a (bool, str) pair"),
        ("returns_pair_without_text", "returned (True, 7) (tuple)"),
        ("renames", "raised ValidationError"),
    ],
)
def test_a_broken_rule_is_an_error_never_a_pass(tmp_path: Path, function: str, reason: str) -> None:
    case = _case(tmp_path, {"name": "rule", "function": f"my_rules:{function}"}, {"name": "plain", "function": "my_rules:plain"})
    got = _scores(case, "ok")
    assert got["rule"].status == "error" and reason in got["rule"].detail["reason"], got["rule"].detail
    assert got["plain"].status == "pass"  # the case's other checks still run
    if function == "raises":
        assert got["rule"].detail["where"].startswith("my_rules.py:")


def test_the_function_cannot_change_the_case_or_the_args_it_is_given(tmp_path: Path) -> None:
    case = _case(tmp_path, {"name": "rule", "function": "my_rules:mutates", "args": {"k": [1]}})
    rs = [Response(case_id="c1", target=t, repeat=0, fingerprint="f", text="x") for t in ("baseline", "candidate")]
    assert [s.status for s in score_case(case, rs)] == ["pass", "pass"]  # each call gets fresh args
    assert case.params == {} and case.checks.python.root[0].args == {"k": [1]}


def test_a_module_that_cannot_be_loaded_at_scoring_time_errors_on_every_answer(tmp_path: Path) -> None:
    case = _case(tmp_path, {"name": "rule", "function": "my_rules:plain"}, {"name": "other", "function": "my_rules:plain"})
    moved = case.model_copy(
        update={
            "checks": case.checks.replace(
                python=type(case.checks.python)(
                    [case.checks.python.root[0].model_copy(update={"function": "my_rules:gone"}), case.checks.python.root[1]]
                )
            )
        }
    )
    got = _scores(moved, "ok")
    assert got["rule"].status == "error" and "has no 'gone'" in got["rule"].detail["reason"]
    assert got["other"].status == "pass"


def test_validate_reports_malformed_python_checks_as_path_line_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_rules.py").write_text(RULES, encoding="utf-8")
    (tmp_path / "broken_rules.py").write_text("import not_a_module_anywhere_qc\n", encoding="utf-8")
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r"}]}},
            {"id": "b", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r", "function": "my_rules.plain"}]}},
            {"id": "c", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r", "function": "nowhere_qc:f"}]}},
            {"id": "d", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r", "function": "my_rules:nope"}]}},
            {"id": "e", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r", "function": "my_rules:NOT_CALLABLE"}]}},
            {"id": "f", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r", "function": "broken_rules:f"}]}},
            {"id": "g", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "has space", "function": "my_rules:plain"}]}},
            {"id": "h", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "r", "function": "my_rules:plain", "arg": {}}]}},
            {
                "id": "i",
                "category": "qa",
                "prompt": "p",
                "checks": {"python": [{"name": "r", "function": "my_rules:plain", "folder": "nope"}]},
            },
        ],
    )
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith(str(f))]
    assert lines[0] == f"{f}:1: checks.python[0].function: required field is missing"
    assert lines[1] == f"{f}:2: checks.python[0].function: expected 'module:function' (like 'my_rules:no_competitor'), got 'my_rules.plain'"
    assert lines[2].startswith(f"{f}:3: checks.python[0].function: cannot load nowhere_qc:f: no module 'nowhere_qc' in {tmp_path}")
    assert lines[3].startswith(f"{f}:4: checks.python[0].function: cannot load my_rules:nope: module my_rules (") and lines[3].endswith(
        "has no 'nope'"
    )
    assert (
        lines[4] == f"{f}:5: checks.python[0].function: cannot load my_rules:NOT_CALLABLE: my_rules:NOT_CALLABLE is a int, not a function"
    )
    assert lines[5].startswith(
        f"{f}:6: checks.python[0].function: cannot load broken_rules:f: importing broken_rules from {tmp_path} failed: "
        "ModuleNotFoundError: No module named 'not_a_module_anywhere_qc'"
    )
    assert lines[6].startswith(f"{f}:7: checks.python[0].name: 'has space' is not a check name")
    assert lines[7] == f"{f}:8: checks.python[0].arg: unknown key"
    assert lines[8] == f"{f}:9: checks.python[0].folder: no folder {tmp_path / 'nope'}"
    assert len(lines) == 9 and "Traceback" not in err


def test_two_suites_with_same_named_modules_each_get_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = []
    for word in ("alpha", "beta"):
        d = tmp_path / word
        d.mkdir()
        (d / "rules.py").write_text(
            f"from helpers_{word} import WORD\n\ndef says(answer, case, args):\n    return WORD in answer\n", encoding="utf-8"
        )
        (d / f"helpers_{word}.py").write_text(f"WORD = {word!r}\n", encoding="utf-8")
        write_suite(
            d / "s.jsonl",
            [{"id": word, "category": "qa", "prompt": "p", "checks": {"python": [{"name": "says", "function": "rules:says"}]}}],
        )
    path_before = list(sys.path)
    monkeypatch.chdir(tmp_path)
    cases = load_suite([tmp_path / "alpha" / "s.jsonl", tmp_path / "beta" / "s.jsonl"])
    assert sys.path == path_before and "rules" not in sys.modules
    for case, word in zip(cases, ("alpha", "beta"), strict=True):
        assert _scores(case, f"I say {word}")["says"].status == "pass"
        assert _scores(case, "I say nothing")["says"].status == "fail"


def test_modules_resolve_from_the_current_folder_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd_rules_qc.py").write_text("def ok(answer, case, args):\n    return answer == 'yes'\n", encoding="utf-8")
    f = write_suite(
        tmp_path / "suites" / "s.jsonl",
        [{"id": "a", "category": "qa", "prompt": "p", "checks": {"python": {"name": "ok", "function": "cwd_rules_qc:ok"}}}],
    )
    monkeypatch.chdir(tmp_path)
    [case] = load_suite([f])
    assert _scores(case, "yes")["ok"].status == "pass"


def test_rescoring_from_the_store_finds_the_module_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _case(tmp_path, {"name": "no_competitor", "function": "my_rules:no_competitor", "args": {"names": ["Acme"]}})
    store = RunStore.create(tmp_path / "run", {"suite_fingerprint": "x", "targets": {}, "repeats": 1}, [case])
    store.put_response(Response(case_id="c1", target="baseline", repeat=0, fingerprint="f", text="fine"))
    store.put_response(Response(case_id="c1", target="candidate", repeat=0, fingerprint="f", text="Acme is better"))
    store.close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with RunStore.open(tmp_path / "run") as store:
        assert score_store(store, workers=2) == 2
        got = {s.target: s for s in store.scores()}
    assert got["baseline"].status == "pass"
    assert got["candidate"].status == "fail" and got["candidate"].detail["reason"] == "mentions Acme"


# ------------------------------------------------------------ end to end


def test_a_custom_check_regresses_in_summary_gate_and_report_like_a_built_in_one(tmp_path: Path) -> None:
    """Baseline answers pass the rule and most candidate answers break it: a regression under the custom name."""
    (tmp_path / "brand_rules.py").write_text(
        "def no_competitor(answer, case, args):\n"
        "    found = [n for n in args['names'] if n in answer]\n"
        "    return (False, 'mentions ' + ', '.join(found)) if found else True\n",
        encoding="utf-8",
    )
    s = write_suite(
        tmp_path / "s.jsonl",
        [
            {
                "id": f"qa-{i}",
                "category": "qa",
                "messages": [{"role": "user", "content": f"q{i}?"}],
                "checks": {"python": [{"name": "no_competitor", "function": "brand_rules:no_competitor", "args": {"names": ["Acme"]}}]},
            }
            for i in range(10)
        ],
    )
    broken = [f"qa-{i}" for i in range(8)]
    out = tmp_path / "run"
    with (
        TestServer(default="Our product fits.") as b,
        TestServer(default="Our product fits.", answers={f"q{i}?": "Buy Acme." for i in range(8)}) as c,
    ):
        code = main(
            ["run", "--baseline", b.url, "--candidate", c.url, "--model", "m", "--suite", str(s), "--out", str(out), "--no-preflight"]
        )
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    cell = summary["categories"]["qa"]["checks"]["no_competitor"]
    assert cell["regressions"] == broken and cell["baseline_pass_rate"] == 1.0 and cell["candidate_pass_rate"] == 0.2
    assert summary["verdict"] == "fail"

    from qualitycheck.report._data import collect

    with RunStore.open(out) as store:
        rows = {r.id: r for r in collect(store, summary).rows}
    assert rows["qa-2"].regressed == ["no_competitor"] and "regression" in rows["qa-2"].flags
    assert rows["qa-2"].details["no_competitor"]["candidate"][0]["reason"] == "mentions Acme"
    assert "mentions Acme" in (out / "report.html").read_text(encoding="utf-8")

    import subprocess

    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--qc-run", str(out), "-v", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "regression::qa::no_competitor::qa-2 FAILED" in proc.stdout, proc.stdout[-3000:]


def test_the_python_check_is_not_a_known_key_misspelt(tmp_path: Path) -> None:
    f = write_suite(tmp_path / "s.jsonl", [{"id": "a", "category": "qa", "prompt": "p", "checks": {"pyhton": []}}])
    with pytest.raises(SuiteError) as exc:
        load_suite([f])
    assert [str(p) for p in exc.value.problems] == [f"{f}:1: checks.pyhton: unknown key (did you mean 'python'?)"]
