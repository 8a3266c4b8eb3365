"""A run scores as it finishes; `qualitycheck score DIR` rebuilds the scores from the store alone."""

from __future__ import annotations

from pathlib import Path

from qualitycheck.cli._main import main
from qualitycheck.core._store import RunStore
from qualitycheck.testserver import TestServer
from tests.helpers import write_suite


def test_run_scores_and_score_dir_rescores_without_calling_endpoints(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "s.jsonl",
        [
            {
                "id": "order",
                "category": "json",
                "messages": [{"role": "user", "content": "order as JSON"}],
                "checks": {"json": {"schema": {"type": "object", "required": ["id"]}}, "exact": True},
            },
            {
                "id": "capital",
                "category": "qa",
                "messages": [{"role": "user", "content": "capital of France"}],
                "checks": {"exact": "Paris", "contains": ["Paris"]},
            },
        ],
    )
    answers_b = {"order as JSON": '{"id": 7}', "capital": "Paris"}
    answers_c = {"order as JSON": '```json\n{"id": 7}\n```', "capital": "Paris"}
    out = tmp_path / "run"
    with TestServer(answers=answers_b) as b, TestServer(answers=answers_c) as c:
        args = ["--baseline", b.url, "--candidate", c.url, "--model", "m", "--suite", str(suite), "--out", str(out), "--no-preflight"]
        main(["run", *args])
        with RunStore.open(out) as store:
            first = {(s.case_id, s.target, s.check): s for s in store.scores()}
            store.replace_scores([], exclude=[])
        requests = len(b.log) + len(c.log)
        assert requests >= 4
        main(["score", str(out)])
        assert len(b.log) + len(c.log) == requests
    with RunStore.open(out) as store:
        again = {(s.case_id, s.target, s.check): s for s in store.scores()}
    assert again == first
    assert first[("order", "candidate", "json_parse")].detail["strict"] is False
    assert first[("order", "candidate", "json_parse")].detail["same_as_baseline"] is True
    assert first[("order", "candidate", "json_schema")].status == "pass"
    assert first[("order", "candidate", "exact")].status == "fail"
    assert first[("capital", "candidate", "exact")].status == "pass"
    assert first[("capital", "baseline", "contains")].status == "pass"
