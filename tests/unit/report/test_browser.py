"""report.html in headless Chromium: no errors or CSP violations, filters, diff, inert payloads.

Uses the session's Chromium (tests/unit/conftest.py). Leaves
tests/artifacts/report.png; with QC_DOCS_SCREENSHOT=1 it also refreshes
docs/report-screenshot.png for the README.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.verdict._model import Summary

from .conftest import XSS_IMG, XSS_SCRIPT

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[3]

# Runs before the page's own script; records CSP violations and any payload that executes.
WATCH = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
window.alert = () => { window.__alerted = true; };
"""


@pytest.fixture
def page(chromium: Any, stored_run: tuple[Path, Summary]) -> Iterator[tuple[Any, list[str]]]:
    run, _ = stored_run
    problems: list[str] = []
    pg = chromium.new_page(viewport={"width": 1280, "height": 900})
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    pg.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith("file://") else None)
    pg.add_init_script(WATCH)
    pg.goto((run / "report.html").as_uri())
    pg.wait_for_selector("#case-table tbody tr")
    yield pg, problems
    pg.close()


def _visible_rows(pg: Any) -> int:
    return pg.locator("#case-table tbody tr").count()


def _wait_rows(pg: Any, n: int) -> None:
    """Wait out the search box's debounce (playwright's expect polls without eval, which the CSP forbids)."""
    from playwright.sync_api import expect

    expect(pg.locator("#case-table tbody tr")).to_have_count(n, timeout=5000)


def test_the_report_loads_clean(page: tuple[Any, list[str]]) -> None:
    pg, problems = page
    assert _visible_rows(pg) == 11
    assert pg.locator("#case-count").text_content() == "11 of 11 cases"
    assert pg.evaluate("window.__csp") == [] and problems == []


def test_filters_narrow_the_case_list(page: tuple[Any, list[str]]) -> None:
    pg, problems = page
    first = pg.locator("#case-table tbody tr").first.locator("td").first.text_content()
    assert first == "qa-3"  # regressions first (this one tolerated: the control's noise floor explains it)
    pg.select_option("#f-flag", "tolerated")
    assert _visible_rows(pg) == 1
    pg.select_option("#f-flag", "regression")
    assert _visible_rows(pg) == 0
    pg.select_option("#f-flag", "")
    pg.select_option("#f-category", "format")
    assert _visible_rows(pg) == 3
    pg.select_option("#f-category", "")
    pg.select_option("#f-check", "exact")
    assert _visible_rows(pg) == 8
    pg.select_option("#f-check", "")
    pg.fill("#f-search", "double-checked")  # text only the candidate's answer holds
    _wait_rows(pg, 1)
    assert pg.locator("#case-table tbody tr td").first.text_content() == "qa-3"
    pg.fill("#f-search", "")
    _wait_rows(pg, 11)
    assert problems == []


def test_a_case_opens_a_side_by_side_diff(page: tuple[Any, list[str]]) -> None:
    pg, problems = page
    pg.locator("#case-table tbody tr", has_text="qa-3").click()
    detail = pg.locator("#case-detail")
    assert detail.is_visible()
    assert pg.locator(".pane-baseline del.chg").first.text_content() == "42"
    assert pg.locator(".pane-candidate ins.chg").first.text_content().startswith("43")
    assert pg.locator(".pane-candidate .first-div").count() == 1
    assert "First divergence at character 15 (marked at the start of its token, 14)" in detail.text_content()
    assert "tolerated regression" in detail.locator("table.checks").text_content()
    assert "Control (A/A)" in detail.locator("table.checks").text_content()
    got = detail.locator(".detail-json .kv > div", has_text="got:")
    assert got.text_content() == "got: The answer is 43.\nI double-checked the arithmetic."  # line break kept, no JSON escapes
    assert problems == []


def test_a_link_with_the_case_id_opens_that_case(chromium: Any, stored_run: tuple[Path, Summary]) -> None:
    pg = chromium.new_page()
    pg.goto((stored_run[0] / "report.html").as_uri() + "#case=fmt-2")
    pg.wait_for_selector("#case-detail .pane-candidate")
    assert pg.locator("#case-detail h3").text_content() == "fmt-2"
    pg.close()


def test_payloads_in_answers_stay_inert_text(page: tuple[Any, list[str]]) -> None:
    pg, problems = page
    for case_id, side, payload in (("fmt-0", "candidate", XSS_SCRIPT), ("fmt-1", "baseline", XSS_IMG)):
        pg.locator("#case-table tbody tr", has_text=case_id).click()
        pane = pg.locator(f".pane-{side} pre")
        assert payload in pane.text_content()
        assert pg.locator("#case-detail img, #case-detail script, #case-detail b").count() == 0
    pg.wait_for_timeout(100)  # give a wrongly inserted onerror handler time to fire
    assert pg.evaluate("window.__alerted === undefined") and pg.evaluate("document.images.length") == 0
    assert pg.evaluate("window.__csp") == [] and problems == []
    out = REPO / "tests" / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    pg.locator("#case-table tbody tr", has_text="qa-3").click()
    pg.evaluate("window.scrollTo(0, 0)")
    pg.screenshot(path=str(out / "report.png"), full_page=True)
    assert (out / "report.png").stat().st_size > 10_000
    if os.environ.get("QC_DOCS_SCREENSHOT") == "1":
        pg.set_viewport_size({"width": 1024, "height": 1000})
        pg.evaluate("window.scrollTo(0, 0)")
        pg.screenshot(path=str(REPO / "docs" / "report-screenshot.png"), full_page=False, type="png")


def test_each_pane_still_reads_as_its_own_answer(page: tuple[Any, list[str]], stored_run: tuple[Path, Summary]) -> None:
    """The diff only marks spans: baseline = equal + deleted runs, candidate = equal + inserted runs."""
    import json

    from qualitycheck.core._store import RunStore

    pg, problems = page
    with RunStore.open(stored_run[0]) as store:
        texts = {(r.case_id, r.target): r.text for r in store.responses()}
    for case_id in ("qa-3", "fmt-0", "fmt-1", "fmt-2", "qa-6"):
        pg.locator("#case-table tbody tr", has_text=case_id).click()
        for side in ("baseline", "candidate"):
            shown = pg.locator(f".pane-{side} pre").text_content()
            assert shown == texts[(case_id, side)], json.dumps([case_id, side, shown])
    assert problems == []


def test_a_capped_report_says_what_it_does_not_embed(chromium: Any, stored_run: tuple[Path, Summary], tmp_path: Path) -> None:
    from qualitycheck.core._store import RunStore
    from qualitycheck.report import write_report

    run, summary = stored_run
    with RunStore.open(run) as store:
        path = write_report(store, summary, tmp_path / "capped.html", max_cases=5)
    # kept: qa-3 (tolerated regression), qa-1 (error), qa-6 (improved), fmt-0 and fmt-1 (divergent); not: fmt-2, 5 identical
    left_out = "qa-7"
    pg = chromium.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.add_init_script(WATCH)
    pg.goto(path.as_uri() + "#case=" + left_out)
    pg.wait_for_selector("#case-table tbody tr")
    assert _visible_rows(pg) == 5
    assert pg.locator("#case-count").text_content() == "5 of 5 cases embedded (6 more not embedded)"
    assert "6 cases are not embedded" in pg.locator("#not-embedded").text_content()
    assert f"Case {left_out} is not embedded in this report" in pg.locator("#case-detail").text_content()
    assert pg.locator("#case-table tbody tr").first.locator("td").first.text_content() == "qa-3"
    assert pg.evaluate("window.__csp") == [] and problems == []
    pg.close()
