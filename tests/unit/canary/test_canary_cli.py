"""`qualitycheck canary` on the command line: --once exit codes, bad input, the schema, re-arming."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from qualitycheck.cli._main import main
from tests.helpers import raw_server
from tests.unit.canary.canary_helpers import actions, recorder, records, vllm_page

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema" / "canary.schema.json"


@contextmanager
def growing_page(text: Callable[[int], str]) -> Iterator[str]:
    """A page whose counters grow with every scrape: traffic flowing while `--once` watches its window."""
    hits = {"n": 0}

    async def handler(request: web.Request) -> web.Response:
        hits["n"] += 1
        return web.Response(text=text(hits["n"]), content_type="text/plain")

    with raw_server(handler) as url:
        yield url + "/metrics"


def _spec(acceptance: float, drafts_per_scrape: int = 100) -> Callable[[int], str]:
    def text(n: int) -> str:
        d = n * drafts_per_scrape
        return vllm_page(drafts=d, draft_tokens=3 * d, accepted=round(3 * d * acceptance), requests=n * 10)

    return text


def _config(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "qualitycheck.yaml"
    p.write_text(body)
    return p


GUARDRAILS = """\
speculative_decoding_guardrails:
  min_acceptance_rate: 0.55
  fallback_action: disable_speculative_decoding_for_route
canary:
  evidence: {min_drafts: 10}
"""


def _once(tmp_path: Path, url: str, *extra: str) -> int:
    """One `--once` window of three scrapes (the page grows per scrape, not per second); a scrape slower than the
    interval leaves the window unevaluated, so the interval is one a loaded machine's local scrape stays well within."""
    cfg = _config(tmp_path, GUARDRAILS)
    args = ["canary", "-c", str(cfg), "--candidate-metrics", url, "--once", "--interval", "0.5s", "--window", "1s"]
    return main([*args, "--out", str(tmp_path / "out"), *extra])


def test_once_healthy_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with growing_page(_spec(0.8)) as url:
        assert _once(tmp_path, url) == 0
    assert "healthy" in capsys.readouterr().out
    (rec,) = records(tmp_path / "out")
    assert rec["guardrails"][0]["result"]["passed"] is True
    from jsonschema import Draft202012Validator

    assert not list(Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).iter_errors(rec))  # a line is what the schema says


def test_once_tripped_exits_1_and_runs_the_action(tmp_path: Path) -> None:
    cmd, log = recorder(tmp_path)
    with growing_page(_spec(0.2)) as url:
        assert _once(tmp_path, url, "--trip-after", "1", "--on-fail", cmd) == 1
    assert [a["env"]["QC_ROUTE"] for a in actions(log)] == ["default"]


def test_once_without_enough_evidence_exits_3(tmp_path: Path) -> None:
    with growing_page(_spec(0.2, drafts_per_scrape=1)) as url:
        assert _once(tmp_path, url, "--trip-after", "1") == 3


def test_once_against_a_dead_endpoint_exits_3_never_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _once(tmp_path, "http://127.0.0.1:9/metrics") == 3
    assert "ALERT: candidate metrics unavailable" in capsys.readouterr().err


def test_cron_once_runs_accumulate_the_failing_streak(tmp_path: Path) -> None:
    with growing_page(_spec(0.2)) as url:
        assert _once(tmp_path, url, "--trip-after", "2") == 0  # failing, not yet tripped
        assert _once(tmp_path, url, "--trip-after", "2") == 1
    assert [r["guardrails"][0]["streak"] for r in records(tmp_path / "out")] == [1, 2]


def test_bad_config_is_file_line_field_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, GUARDRAILS.replace("evidence: {min_drafts: 10}", "evidence: {min_drafts: 10}\n  trip_after: 0\n  windw: 5m"))
    assert main(["canary", "-c", str(cfg), "--candidate-metrics", "http://127.0.0.1:9/metrics", "--once"]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}:6: canary.trip_after:" in err
    assert f"{cfg}:7: canary.windw: unknown key" in err


def test_bad_guardrail_and_bad_flags_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, "speculative_decoding_guardrails:\n  min_acceptance_rat: 0.5\n")
    assert main(["canary", "-c", str(cfg), "--candidate-metrics", "http://x/metrics", "--once"]) == 2
    assert "did you mean 'min_acceptance_rate'" in capsys.readouterr().err
    assert main(["canary", "--candidate-metrics", "http://x/metrics", "--window", "soon"]) == 2
    assert "canary.window" in capsys.readouterr().err
    assert main(["canary", "--candidate-metrics", "http://x/metrics", "--on-fail", "true", "--webhook", "http://h"]) == 2
    assert main(["canary", "--once"]) == 2
    assert "nothing to watch" in capsys.readouterr().err


def test_schema_canary_describes_a_line_and_is_published(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "canary"]) == 0
    printed = capsys.readouterr().out
    assert printed == SCHEMA_FILE.read_text(encoding="utf-8"), "run `qualitycheck schema canary > docs/schema/canary.schema.json`"
    schema = json.loads(printed)
    assert schema["title"] == "qualitycheck canary.jsonl line"
    assert {"format_version", "status", "guardrails", "routes", "actions", "alerts", "gpu"} <= set(schema["properties"])


def test_rearm_of_a_route_never_tripped_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["canary", "--rearm", "chat", "--out", str(tmp_path)]) == 0
    assert "route chat re-armed (was not tripped)" in capsys.readouterr().out
