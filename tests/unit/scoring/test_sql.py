"""SQL scorer behaviour that fixture rows cannot express: time limits and broken fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.scoring import _sql as sqlmod
from qualitycheck.scoring import build_scorers

from .conftest import FIXTURES

RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def _resp(text: str) -> Response:
    return Response(case_id="s1", target="candidate", fingerprint="f", text=text)


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_a_runaway_query_is_stopped_and_fails(monkeypatch: pytest.MonkeyPatch, dialect: str) -> None:
    monkeypatch.setattr(sqlmod, "QUERY_TIMEOUT_S", 0.3)
    case = Case(
        id="s1",
        category="sql",
        prompt="p",
        checks={"sql": {"dialect": dialect, "db": str(FIXTURES / "concert_singer.sql"), "reference": "SELECT count(*) FROM singer"}},
    )
    out = build_scorers(case)[1].score(_resp(RUNAWAY), None)
    assert out.status == "fail" and out.detail["timeout"] is True


def test_a_write_is_refused_and_the_fixture_stays_intact() -> None:
    case = Case(
        id="s1",
        category="sql",
        prompt="p",
        checks={"sql": {"db": str(FIXTURES / "concert_singer.sql"), "reference": "SELECT count(*) FROM singer"}},
    )
    scorer = build_scorers(case)[1]
    denied = scorer.score(_resp("DROP TABLE singer"), None)
    assert denied.status == "fail" and "not authorized" in denied.detail["error"]
    assert scorer.score(_resp("SELECT count(*) FROM singer"), None).status == "pass"


def test_a_fixture_that_cannot_load_scores_error_not_crash(tmp_path: Path) -> None:
    bad = tmp_path / "broken.sql"
    bad.write_text("CREATE TABLE t (a INT);\nINSERT INTO nowhere VALUES (1);\n")
    case = Case(id="s1", category="sql", prompt="p", checks={"sql": {"db": str(bad), "reference": "SELECT a FROM t"}})
    scorers = build_scorers(case)
    assert [s.check for s in scorers] == ["sql_parse", "sql_result"]
    assert scorers[0].score(_resp("SELECT a FROM t"), None).status == "pass"
    out = scorers[1].score(_resp("SELECT a FROM t"), None)
    assert out.status == "error" and "nowhere" in out.detail["reason"]


def test_a_reference_that_fails_on_the_fixture_is_an_error_not_a_fail() -> None:
    case = Case(
        id="s1",
        category="sql",
        prompt="p",
        checks={"sql": {"db": str(FIXTURES / "concert_singer.sql"), "reference": "SELECT nope FROM singer"}},
    )
    out = build_scorers(case)[1].score(_resp("SELECT 1"), None)
    assert out.status == "error" and "reference query fails" in out.detail["reason"]
