"""A stored run built by the real pipeline on test servers, for the report tests.

The candidate regresses one case, improves one, fails on one, and two cases
answer with HTML/script payloads; the control answers like the baseline except
on two cases, where it disagrees with it (flaky): that measured noise is what
explains the one regression, so the summary tolerates it. The `exact` scores are written through the
store's public API (what the scoring stage does), so these tests do not
depend on which scorer families are present in the tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._records import Score
from qualitycheck.core._store import RunStore
from qualitycheck.report import write_report
from qualitycheck.testserver import Fault, TestServer
from qualitycheck.verdict._model import Summary
from qualitycheck.verdict._summary import build_summary, write_summary
from tests.helpers import write_suite

RIGHT = "The answer is 42."
XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(1)>"


def _cases() -> list[dict[str, Any]]:
    qa = [{"id": f"qa-{i}", "category": "qa", "messages": [{"role": "user", "content": f"question qa {i}?"}]} for i in range(8)]
    fmt = [{"id": f"fmt-{i}", "category": "format", "messages": [{"role": "user", "content": f"render fmt {i}?"}]} for i in range(3)]
    return qa + fmt


def _exact_scores(store: RunStore) -> list[Score]:
    out = []
    for r in store.responses():
        if not r.case_id.startswith("qa-"):
            continue
        if not r.ok:
            out.append(Score(case_id=r.case_id, target=r.target, check="exact", status="error", detail={"reason": "no response"}))
            continue
        ok = r.text.strip() == RIGHT
        out.append(
            Score(
                case_id=r.case_id,
                target=r.target,
                check="exact",
                status="pass" if ok else "fail",
                detail={} if ok else {"expected": RIGHT, "got": r.text},
            )
        )
    return out


def build_run(folder: Path) -> tuple[Path, Summary]:
    suite = write_suite(folder / "suite.jsonl", _cases())
    out = folder / "run"
    cand_answers = {
        "qa 3?": "The answer is 43.\nI double-checked the arithmetic.",  # regression
        "qa 6?": RIGHT,  # improvement (the baseline is wrong here)
        "fmt 0?": f"Here: {XSS_SCRIPT} then {XSS_IMG} done.",
        "fmt 2?": "A *different* rendering of the same idea.",
    }
    base_answers = {
        "qa 6?": "The answer is 41.",
        "fmt 1?": f"{XSS_IMG}</script><b>bold</b>",
        "fmt 0?": "Here: plain text done.",
        "fmt 2?": "A rendering of the idea.",
    }
    control_answers = {**base_answers, "qa 4?": "The answer is 40.", "qa 5?": "The answer is 40."}  # the A/A disagreements
    with (
        TestServer(default=RIGHT, answers=base_answers) as b,
        TestServer(default=RIGHT, answers=cand_answers, faults=[Fault("status", match="qa 1?", status=500, times=None)]) as c,
        TestServer(default=RIGHT, answers=control_answers) as k,
    ):
        rc = main(
            [
                "run",
                "--baseline",
                b.url,
                "--candidate",
                c.url,
                "--control",
                k.url,
                "--model",
                "m",
                "--suite",
                str(suite),
                "--out",
                str(out),
                "--no-preflight",
                "--retries",
                "0",
            ]
        )
    assert rc in (0, 1)
    with RunStore.open(out) as store:
        store.replace_scores(_exact_scores(store), checks=["exact"])
        summary = build_summary(store)
        write_summary(out, summary)
        write_report(store, summary)
    return out, summary


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    return build_run(tmp_path_factory.mktemp("report"))
