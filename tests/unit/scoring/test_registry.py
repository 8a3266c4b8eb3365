"""The check registry: one declaration per family, no silent name collisions, no import cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._cases import Case, load_suite
from qualitycheck.core._checks import CheckFamilyError, check_registry
from qualitycheck.core._errors import SuiteError
from qualitycheck.core._records import Response
from qualitycheck.scoring import CheckSpec, Outcome, Scorer, build_scorers, check_family, score_case
from tests.helpers import write_suite

PACKAGE = Path(__file__).resolve().parents[3] / "qualitycheck"


def problems(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as exc:
        load_suite([path])
    return [str(p) for p in exc.value.problems]


# ------------------------------------------------------------ collisions


def test_two_families_producing_one_check_name_is_a_problem_not_an_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "ok", "category": "qa", "prompt": "p", "checks": {"json": True, "yaml": {"format": "toml"}}},
            {"id": "both", "category": "qa", "prompt": "p", "checks": {"json": True, "yaml": {"format": "json"}}},
        ],
    )
    assert problems(f) == [f"{f}:2: checks.yaml: check name 'json_parse' is also produced by checks.json"]
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:2: checks.yaml: check name 'json_parse' is also produced by checks.json" in err and "Traceback" not in err
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--baseline",
                "http://127.0.0.1:9",
                "--candidate",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--suite",
                str(f),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert not out.exists()


def test_a_custom_check_may_not_take_a_built_in_name_or_another_custom_checks(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text("def ok(answer, case, args):\n    return True\n", encoding="utf-8")
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "exact", "function": "rules:ok"}]}},
            {"id": "b", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "json_schema", "function": "rules:ok"}]}},
            {
                "id": "c",
                "category": "qa",
                "prompt": "p",
                "checks": {"python": [{"name": "tone", "function": "rules:ok"}, {"name": "tone", "function": "rules:ok"}]},
            },
            {"id": "d", "category": "qa", "prompt": "p", "checks": {"python": [{"name": "judge", "function": "rules:ok"}]}},
        ],
    )
    assert problems(f) == [
        f"{f}:1: checks.python[0].name: check name 'exact' is a built-in check name (checks.exact); choose another",
        f"{f}:2: checks.python[0].name: check name 'json_schema' is a built-in check name (checks.json); choose another",
        f"{f}:3: checks.python[1].name: check name 'tone' is also produced by checks.python[0]",
        f"{f}:4: checks.python[0].name: check name 'judge' is a built-in check name (checks.judge); choose another",
    ]


def test_unknown_keys_keep_their_message_and_get_a_did_you_mean(tmp_path: Path) -> None:
    f = write_suite(
        tmp_path / "s.yaml",
        [
            {"id": "a", "category": "qa", "prompt": "p", "checks": {"regx": "x"}},
            {"id": "b", "category": "qa", "prompt": "p", "checks": {"astrology": True}},
        ],
    )
    assert problems(f) == [
        f"{f}:5: checks.regx: unknown key (did you mean 'regex'?)",
        f"{f}:10: checks.astrology: unknown key",
    ]


def test_every_existing_check_name_and_shorthand_still_holds() -> None:
    case = Case(
        id="c",
        category="qa",
        prompt="p",
        checks={
            "exact": "Paris",
            "regex": "^P",
            "contains": ["Par"],
            "json": True,
            "yaml": {"format": "ini"},
            "sql": {"db": "/x.sql", "reference": "SELECT 1"},
            "unit_tests": {"tests": "assert f()"},
            "judge": "rubric",
        },
    )
    assert case.check_names() == ["exact", "regex", "contains", "json_parse", "ini_parse", "sql_parse", "sql_result", "unit_tests", "judge"]
    assert case.checks.exact.expected == "Paris" and case.checks.contains.all == ["Par"] and case.checks.judge.mode == "rubric"
    assert Case(id="c", category="qa", prompt="p", checks={"exact": True, "contains": "x"}).checks.contains.all == ["x"]
    assert Case(id="c", category="qa", prompt="p", checks={"exact": False}).check_names() == []
    again = Case.model_validate(case.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert again == case and again.content_hash() == case.content_hash()


# ------------------------------------------------------------ one declaration


class ShoutCheck(CheckSpec):
    min_exclamations: int = 1


class _ShoutScorer:
    check = "shout"

    def __init__(self, spec: ShoutCheck):
        self.spec = spec

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        n = answer.text.count("!")
        return Outcome("pass" if n >= self.spec.min_exclamations else "fail", n, {"exclamations": n})


def _declare_shout(names: tuple[str, ...] = ("shout",)) -> None:
    @check_family("shout", spec=ShoutCheck, names=names)
    def shout(spec: ShoutCheck, case: Case) -> Sequence[Scorer]:
        return [_ShoutScorer(spec)]


@pytest.fixture
def shout_family() -> Iterator[None]:
    _declare_shout()
    yield
    check_registry.unregister("shout")


def test_a_family_declared_at_runtime_is_validated_listed_and_scored(shout_family: None, tmp_path: Path) -> None:
    f = write_suite(
        tmp_path / "s.jsonl",
        [
            {"id": "a", "category": "qa", "prompt": "p", "checks": {"shout": {"min_exclamations": 2}, "exact": True}},
            {"id": "b", "category": "qa", "prompt": "p", "checks": {"shout": {"loud": True}}},
        ],
    )
    assert problems(f) == [f"{f}:2: checks.shout.loud: unknown key"]
    case = Case(id="a", category="qa", prompt="p", checks={"shout": {"min_exclamations": 2}, "exact": True})
    assert case.check_names() == ["exact", "shout"] and case.checks.shout.min_exclamations == 2
    rs = [Response(case_id="a", target=t, repeat=0, fingerprint="f", text=x) for t, x in (("baseline", "hi!!"), ("candidate", "hi!"))]
    got = {(s.target, s.check): (s.status, s.detail) for s in score_case(case, rs)}
    assert got[("baseline", "shout")] == ("pass", {"exclamations": 2})
    assert got[("candidate", "shout")] == ("fail", {"exclamations": 1})
    assert got[("candidate", "exact")][0] == "fail"


def test_a_key_cannot_be_declared_twice(shout_family: None) -> None:
    with pytest.raises(CheckFamilyError, match=r"'shout' .* is already declared by .*shout"):

        @check_family("shout", spec=ShoutCheck, names=("shout",))
        def again(spec: ShoutCheck, case: Case) -> Sequence[Scorer]:
            return []


def test_declaring_the_same_factory_again_replaces_it(shout_family: None) -> None:
    """A module imported twice (reload, pytester's module snapshots) declares its family again."""
    first = check_registry["shout"]
    _declare_shout(("shout", "whisper"))
    assert first.origin == check_registry["shout"].origin and check_registry["shout"].names == ("shout", "whisper")


def test_a_factory_that_raises_or_builds_other_names_errors_per_declared_name(tmp_path: Path) -> None:
    @check_family("flaky_family", spec=ShoutCheck, names=("one", "two"))
    def broken(spec: ShoutCheck, case: Case) -> Sequence[Scorer]:
        if spec.min_exclamations == 0:
            raise OSError("fixture gone")
        return [_ShoutScorer(spec)]  # named "shout": not what the family declares

    try:
        for n, reason in ((0, "cannot set up the flaky_family check: OSError: fixture gone"), (1, "declares ['one', 'two']")):
            case = Case(id="a", category="qa", prompt="p", checks={"flaky_family": {"min_exclamations": n}, "regex": "x"})
            scorers = build_scorers(case)
            assert [s.check for s in scorers] == ["regex", "one", "two"]
            r = Response(case_id="a", target="baseline", repeat=0, fingerprint="f", text="x")
            scores = score_case(case, [r], scorers)
            assert [s.status for s in scores] == ["pass", "error", "error"]
            assert reason in scores[1].detail["reason"]
    finally:
        check_registry.unregister("flaky_family")


# ------------------------------------------------------------ imports


def _imports(path: Path) -> set[str]:
    """Every qualitycheck module a file imports, deferred (inside functions) or not."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qualitycheck"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("qualitycheck"))
    return out


def test_scoring_modules_import_each_other_one_way() -> None:
    modules = {f"qualitycheck.scoring.{p.stem}": _imports(p) for p in (PACKAGE / "scoring").glob("_*.py")}
    graph = {m: {i for i in imps if i in modules and i != m} for m, imps in modules.items()}
    assert not {i for i in graph["qualitycheck.scoring._base"]}, "the base imports no family"
    seen: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if seen.get(m) == 1:
            raise AssertionError(f"import cycle: {' -> '.join([*path, m])}")
        if seen.get(m) == 2:
            return
        seen[m] = 1
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        seen[m] = 2

    for m in sorted(graph):
        visit(m, [])


def test_core_does_not_import_scoring() -> None:
    for p in (PACKAGE / "core").glob("*.py"):
        bad = {i for i in _imports(p) if not i.startswith("qualitycheck.core")}
        assert not bad, f"{p.name} imports {sorted(bad)}"
