"""Data-driven scorer tests: each fixture row is (answer, checks, expected verdicts).

A row of tests/fixtures/scoring/<family>.jsonl holds:
  id        what the row shows
  output    the answer text (scored as the candidate when `baseline` is given)
  checks    the case's `checks`, exactly as a suite would write them
  expect    check name → expected status
  detail    optional: check name → {dotted.path: expected value} inside Score.detail
  baseline  optional: the baseline's answer for the same repeat
  finish_reason, error   optional: the response's finish_reason / transport error
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response
from qualitycheck.scoring import score_case

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "scoring"


def load_rows(name: str) -> list[Any]:
    rows = []
    path = FIXTURES / name
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("//"):
            row = json.loads(line)
            rows.append(pytest.param(row, id=row.get("id", f"line{n}")))
    return rows


def response(text: str, target: str = "candidate", **kw: Any) -> Response:
    return Response(case_id="c1", target=target, repeat=0, fingerprint="f", text=text, **kw)


def dig(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        d = d[int(part)] if isinstance(d, list) else d[part]
    return d


def check_row(row: dict[str, Any], base_dir: Path = FIXTURES) -> dict[str, Any]:
    """Score the row's output and assert every expected status and detail; return scores by check."""
    checks = dict(row["checks"])
    if "sql" in checks and checks["sql"].get("db"):
        checks["sql"] = {**checks["sql"], "db": str(base_dir / checks["sql"]["db"])}
    case = Case(id="c1", category="t", prompt="p", checks=checks)
    kw: dict[str, Any] = {}
    if row.get("finish_reason"):
        kw["finish_reason"] = row["finish_reason"]
    if row.get("error"):
        kw["error"] = ErrorInfo(kind="timeout", message=row["error"])
    rs = [response(row["output"], "candidate" if "baseline" in row else row.get("target", "baseline"), **kw)]
    if "baseline" in row:
        rs.append(response(row["baseline"], "baseline"))
    scores = {s.check: s for s in score_case(case, rs) if s.target == rs[0].target}
    got = {k: scores[k].status for k in row["expect"]}
    assert got == row["expect"], {k: scores[k].detail for k in row["expect"]}
    for check, paths in row.get("detail", {}).items():
        for path, want in paths.items():
            assert dig(scores[check].detail, path) == want, (check, path, scores[check].detail)
    return scores
