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
from tests.helpers import in_thread, write_suite

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
    """Built in a thread of its own: the browser tests load it while the session's browser holds this thread's event loop."""
    return in_thread(build_run, tmp_path_factory.mktemp("report"))


# ------------------------------------------------------------------ a run with likelihood evidence
LP = {"The": -0.1, " cat": -0.5, " dog": -0.7, " sat.": -0.4, " ran.": -0.6, " slept.": -0.9}
"""The toy baseline model (`TestServer(token_logprobs=...)`): these pieces are its likely words; any other gets -9 nats."""
UNLIKELY_XSS = " <img/src=x/onerror=alert(1)>"
"""A piece the baseline model finds unlikely that is also markup: marked in the page, it must stay text."""
GOOD = [["The"], [" cat", " dog"], [" sat.", " ran.", " slept."]]
BROKEN = [["The"], [" zq", " cat"], [" zq", UNLIKELY_XSS]]
GREEDY = "The cat sat."
DECISIVE = "The zq sat."


def _sampler(pieces: list[list[str]], seed: int) -> Any:
    """Sampled answers drawn piece by piece (seeded); greedy cases (no temperature) answer `GREEDY`."""
    import random

    rng = random.Random(seed)

    def answer(body: dict[str, Any]) -> str:
        if not body.get("temperature"):
            return GREEDY
        return "".join(rng.choice(options) for options in pieces)

    return answer


def build_likelihood_run(folder: Path) -> Path:
    """A run whose sampled category fails on the likelihood evidence (its `contains` check never passes on either
    side) and whose greedy category fails on a decisive divergence (`fmt-2`: " zq" where the baseline wrote " cat").

    The scorer is the baseline server; it decodes the candidate's pieces because they are among its scripted
    answers (`vocabulary`, a prompt never asked), as a real scorer decodes every token of its vocabulary.
    """
    from tests.helpers import qa_cases, run_argv

    cases = [*qa_cases(16, "chat", params={"temperature": 0.8}, checks={"contains": "42"}), *qa_cases(4, "fmt")]
    suite = write_suite(folder / "suite.jsonl", cases)
    vocabulary = {"never asked: vocabulary": "".join(p for options in BROKEN for p in options)}
    with (
        TestServer(default=_sampler(GOOD, 1), answers=vocabulary, token_logprobs=LP) as b,
        TestServer(default=_sampler(BROKEN, 2), answers={"fmt 2?": DECISIVE}, token_logprobs=LP) as c,
    ):
        rc = main(run_argv(b.url, c.url, suite, folder / "run"))
    assert rc == 1
    return folder / "run"


@pytest.fixture(scope="module")
def likelihood_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built in a thread of its own, as `stored_run` is."""
    return in_thread(build_likelihood_run, tmp_path_factory.mktemp("likelihood"))
