"""A run built by the real pipeline on test servers, with a judge, for the review tests.

Two categories of open-ended cases judged pairwise; the candidate's answer
differs from the baseline's on some of them (worse on `sum-1`, `sum-3` and
`exp-1`, better on `sum-2`), and the judge prefers answers saying GOOD.
The model name, the target URLs and the case ids are markers the blinded
page must never show.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._store import RunStore
from qualitycheck.testserver import TestServer
from tests.helpers import in_thread, write_suite

MODEL = "zeta-model-7b"
BASELINE_WORDS = {i: f"GOOD summary of topic {i}: the facts, in order." for i in range(6)}
CANDIDATE_WORDS = {
    1: "meh, topic 1 is a topic.",
    2: "GOOD summary of topic 2: the facts, in order, with the figures.",
    3: "meh. Something about topic 3.",
}
EXPLAIN_BASE = {i: f"GOOD explanation {i}: step by step." for i in range(4)}
EXPLAIN_CAND = {1: "meh explanation 1."}


def _cases() -> list[dict[str, Any]]:
    summ = [
        {
            "id": f"sum-{i}",
            "category": "summaries",
            "messages": [{"role": "user", "content": f"Summarise topic {i}."}],
            "checks": {"judge": "pairwise"},
        }
        for i in range(6)
    ]
    expl = [
        {
            "id": f"exp-{i}",
            "category": "explain",
            "messages": [{"role": "user", "content": f"Explain item {i}."}],
            "checks": {"judge": "pairwise"},
        }
        for i in range(4)
    ]
    return summ + expl


def _judge(body: dict[str, Any]) -> str:
    text = "\n".join(m["content"] for m in body["messages"])
    a = text.split("reply A", 1)[-1].split("reply B", 1)[0]
    b = text.split("reply B", 1)[-1]
    if "GOOD" in a and "GOOD" not in b:
        return "[[A]]"
    if "GOOD" in b and "GOOD" not in a:
        return "[[B]]"
    return "[[TIE]]"


def build_review_run(folder: Path) -> Path:
    suite = write_suite(folder / "suite.jsonl", _cases())
    out = folder / "run"
    base = {f"topic {i}.": t for i, t in BASELINE_WORDS.items()} | {f"item {i}.": t for i, t in EXPLAIN_BASE.items()}
    cand = {**base, **{f"topic {i}.": t for i, t in CANDIDATE_WORDS.items()}, **{f"item {i}.": t for i, t in EXPLAIN_CAND.items()}}
    with TestServer(answers=base) as b, TestServer(answers=cand) as c, TestServer(default=_judge) as j:
        rc = main(
            ["run", "--baseline", b.url, "--candidate", c.url, "--model", MODEL, "--suite", str(suite), "--out", str(out)]
            + ["--judge", j.url, "--judge-model", "judge-m", "--no-preflight", "--retries", "0"]
        )
    assert rc in (0, 1)
    return out


@pytest.fixture(scope="session")
def review_run_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built in a thread of its own: the browser test loads it while the session's browser holds this thread's event loop."""
    return in_thread(build_review_run, tmp_path_factory.mktemp("review-template"))


@pytest.fixture
def review_run(review_run_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the run per test: imports change it."""
    out = tmp_path / "run"
    shutil.copytree(review_run_template, out)
    return out


def key_of(run: Path) -> dict[str, Any]:
    with RunStore.open(run) as store:
        return dict(store.artifact("review_key"))


def page_data(run: Path) -> dict[str, Any]:
    html = (run / "review.html").read_text(encoding="utf-8")
    block = html.split('<script type="application/json" id="qc-review">', 1)[1].split("</script>", 1)[0]
    return dict(json.loads(block))


def labels_file(path: Path, run: Path, reviewer: str, choose: dict[str, str], note: str = "") -> Path:
    """A labels export as review.html writes it; `choose`: case id → baseline | candidate | tie | both_wrong."""
    key = key_of(run)
    labels = []
    for p in key["pairs"]:
        want = choose.get(p["case_id"])
        if want is None:
            continue
        if want in ("baseline", "candidate"):
            choice = "A" if p["a"] == want else "B"
        else:
            choice = want
        labels.append({"pair": p["id"], "choice": choice, "note": note})
    run_id = page_data(run)["run"]
    path.write_text(
        json.dumps({"format": "qualitycheck-review-labels", "version": 1, "run": run_id, "reviewer": reviewer, "labels": labels})
    )
    return path
