"""review.html in headless Chromium: keyboard labelling, progress across a reload, export, then import.

Uses the session's Chromium (tests/unit/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.verdict._model import read_summary

from .conftest import key_of, page_data

pytestmark = pytest.mark.browser

WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


def _choose(pg: Any) -> str:
    """The key a reviewer who likes complete answers presses: the answer saying GOOD, or a tie."""
    a, b = pg.locator("#answer-a").text_content(), pg.locator("#answer-b").text_content()
    if ("GOOD" in a) == ("GOOD" in b):
        return "3"
    return "1" if "GOOD" in a else "2"


def _progress(pg: Any) -> str:
    return str(pg.locator("#progress").text_content())


def _reload_until(pg: Any, progress: str, position: str, tries: int = 5) -> None:
    """Reload until the page reads back the last state it stored, at most `tries` times.

    The page writes localStorage on every label and move, but Chromium hands
    each write to its storage service asynchronously, and a reload the test
    asks for at once can read the store before the last write has reached
    it. The page never writes on load, so an early reload loses nothing and
    a later one sees the last state; one that never does is a page that lost it.
    """
    for _ in range(tries):
        pg.reload()
        if (_progress(pg), pg.locator("#position").text_content()) == (progress, position):
            return
        pg.wait_for_timeout(200)
    assert (_progress(pg), pg.locator("#position").text_content()) == (progress, position)


def test_label_with_the_keyboard_reload_export_and_import(chromium: Any, review_run: Path, tmp_path: Path) -> None:
    assert main(["review", str(review_run), "--seed", "5"]) == 0
    total = len(page_data(review_run)["pairs"])
    assert total >= 4
    problems: list[str] = []
    ctx = chromium.new_context(accept_downloads=True)
    pg = ctx.new_page()
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith(("file://", "blob:")) else None)
    pg.add_init_script(WATCH)
    pg.goto((review_run / "review.html").as_uri())
    assert _progress(pg) == f"0 of {total} labelled"

    pg.keyboard.press("x")  # no name yet: the page asks for it instead of exporting
    assert _progress(pg) == "Enter your name before exporting."
    pg.fill("#reviewer", "ann")
    pg.press("#reviewer", "Escape")  # leaves the field: keys label again
    pg.keyboard.press("e")  # a note on the first pair, then its label
    pg.keyboard.type("checked twice")
    pg.keyboard.press("Escape")
    pg.keyboard.press(_choose(pg))
    for _ in range(2):
        pg.keyboard.press(_choose(pg))
    assert _progress(pg) == f"3 of {total} labelled"
    assert pg.locator("#position").text_content() == f"pair 4 of {total}"
    pg.keyboard.press("p")
    assert pg.locator("#position").text_content() == f"pair 3 of {total}"
    pg.keyboard.press("ArrowRight")
    assert pg.locator("#position").text_content() == f"pair 4 of {total}"

    _reload_until(pg, f"3 of {total} labelled", f"pair 4 of {total}")
    assert pg.locator("#reviewer").input_value() == "ann"
    assert pg.locator("#position").text_content() == f"pair 4 of {total}"
    pg.keyboard.press("ArrowLeft")
    pg.keyboard.press("ArrowLeft")
    pg.keyboard.press("ArrowLeft")
    assert pg.locator("#note").input_value() == "checked twice"  # the first pair kept its note
    assert pg.locator("#pair-state").text_content() == "labelled"
    pg.keyboard.press("ArrowRight")
    pg.keyboard.press("ArrowRight")
    pg.keyboard.press("ArrowRight")

    while _progress(pg) != f"{total} of {total} labelled":
        pg.keyboard.press(_choose(pg))
    with pg.expect_download() as dl:
        pg.keyboard.press("x")
    exported = tmp_path / "labels-ann.json"
    dl.value.save_as(exported)
    assert pg.evaluate("window.__csp") == [] and problems == []
    ctx.close()

    body = json.loads(exported.read_text())
    assert body["reviewer"] == "ann" and body["run"] == page_data(review_run)["run"] and len(body["labels"]) == total
    assert {lab["choice"] for lab in body["labels"]} <= {"A", "B", "tie"}
    assert any(lab["note"] == "checked twice" for lab in body["labels"])
    assert not any(k in json.dumps(body) for k in ("baseline", "candidate", "sum-", "exp-"))

    rc = main(["review", str(review_run), "--import", str(exported)])
    s = read_summary(review_run / "summary.json")
    assert s.human_review is not None and s.human_review.reviewers == ["ann"] and s.human_review.labels == total
    key = {p["id"]: p for p in key_of(review_run)["pairs"]}
    reviewed = {key[lab["pair"]]["case_id"] for lab in body["labels"]}
    losers = {"sum-1", "sum-3", "exp-1"} & reviewed
    human_losses = set()
    for cat in s.categories.values():
        if cat.human_review is not None:
            human_losses |= set(cat.human_review.lost_cases)
            assert cat.human_review.judge_agreement is not None and cat.human_review.judge_agreement.kappa in (1.0, None)
    assert human_losses == losers and losers
    assert rc == 1 and s.verdict == "fail"
    report = (review_run / "report.html").read_text(encoding="utf-8")
    assert 'id="human-review"' in report and "ann" in report and all(c in report for c in losers)
    assert "Human spot-checks" in (review_run / "signoff.md").read_text(encoding="utf-8")
