"""report.html in headless Chromium for a run with likelihood evidence: what a release manager sees of it.

The run (`conftest.build_likelihood_run`): the sampled category `chat` fails on
the likelihood alone (its check never passes on either side), the greedy
category `fmt` on a decisive divergence (`fmt-2`). One of the candidate's
unlikely pieces is markup: marked in the page, it must stay text. Leaves
tests/artifacts/report-likelihood.png.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._store import RunStore
from qualitycheck.testserver import tokenize_text

from .conftest import LP, UNLIKELY_XSS
from .test_browser import REPO, WATCH

pytestmark = pytest.mark.browser


def test_the_page_shows_the_likelihood_evidence_and_marks_the_unlikely_tokens(chromium: Any, likelihood_run: Path) -> None:
    with RunStore.open(likelihood_run) as store:
        texts = {(r.case_id, r.target, r.repeat): r.text for r in store.responses()}
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    try:
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.add_init_script(WATCH)
        page.goto((likelihood_run / "report.html").as_uri())
        page.wait_for_selector("#case-table tbody tr")
        _category_cards(page)
        _sampled_case(page, texts)
        _greedy_case(page)
        page.wait_for_timeout(100)  # give a wrongly inserted onerror handler time to fire
        assert page.evaluate("window.__alerted === undefined") and page.evaluate("document.images.length") == 0
        assert page.evaluate("window.__csp") == [] and problems == [], problems
    finally:
        page.close()


def _category_cards(page: Any) -> None:
    chat = page.locator(".cat", has=page.locator("h3", has_text="chat"))
    assert chat.locator("[data-role=likelihood-badge]").inner_text().startswith("likelihood changed -")
    cell = chat.locator("[data-role=likelihood]")
    assert cell.locator(".failed-by").is_visible()
    said = cell.inner_text()
    assert "This failed the category: the candidate writes text the baseline model would rarely write." in said
    assert "baseline samples -0.47 → candidate samples -4." in said and "Holm p " in said and " nats per token, p " in said, said
    fmt = page.locator(".cat", has=page.locator("h3", has_text="fmt"))
    row = fmt.locator("[data-role=divergences] table tr", has_text="fmt-2").inner_text()
    assert "the baseline gives the candidate's token 0.012% (rank 110)" in row and "decisive" in row, row
    assert fmt.locator("[data-role=divergences] .failed-by").is_visible()


def _sampled_case(page: Any, texts: dict[tuple[str, str, int], str]) -> None:
    """Opened from the category card's link: every sample of both sides, least likely first, the unlikely tokens marked."""
    link = page.locator("[data-role=likelihood] a").first
    case_id = link.inner_text()
    link.click()
    detail = page.locator("#case-detail")
    detail.locator("#case-likelihood").wait_for()
    assert detail.locator("h3").inner_text() == case_id
    section = detail.locator("#case-likelihood")
    assert "least likely first" in section.locator("h4").inner_text()
    samples = section.locator(".sample")
    assert samples.count() == 4, "two samples per side"
    means = [float(samples.nth(i).locator(".mean").inner_text()) for i in range(4)]
    assert means == sorted(means), means
    for i in range(4):
        head = samples.nth(i).locator("div.small").first.inner_text().split()
        text = texts[(case_id, head[0], int(head[2]))]
        assert samples.nth(i).locator("pre").text_content() == text, "the marks only wrap characters: the answer reads as it was"
        unlikely = [p for p in tokenize_text(text) if p not in LP]
        rare = samples.nth(i).locator("mark.ll-rare")
        assert [rare.nth(j).text_content() for j in range(rare.count())] == unlikely, (text, unlikely)
    xss = next(cid for (cid, side, _), t in sorted(texts.items()) if side == "candidate" and UNLIKELY_XSS in t)
    page.fill("#f-search", xss)
    page.locator("#case-table tbody tr", has=page.locator("td.id", has_text=re.compile(f"^{re.escape(xss)}$"))).click()
    page.wait_for_selector(f"#case-detail h3:text-is('{xss}')")
    mark = detail.locator("#case-likelihood mark.ll-rare", has_text="onerror").first
    assert mark.text_content() == UNLIKELY_XSS, "markup the baseline model finds unlikely: marked, and shown as text"
    assert mark.get_attribute("title") == f"token 2: the baseline model gives it {math.exp(-9) * 100:.2g}% (rank 175)"
    assert detail.locator("img, script").count() == 0
    out = REPO / "tests" / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    detail.locator("#case-likelihood").scroll_into_view_if_needed()
    page.screenshot(path=str(out / "report-likelihood.png"), full_page=False)
    page.fill("#f-search", "")


def _greedy_case(page: Any) -> None:
    page.locator(".cat [data-role=divergences] a", has_text="fmt-2").click()
    detail = page.locator("#case-detail")
    page.wait_for_selector("#case-detail .divergence-note")
    assert detail.locator("h3").inner_text() == "fmt-2"
    note = detail.locator(".divergence-note").inner_text()
    assert 'At token 1 the candidate wrote " zq": the baseline gives the candidate\'s token 0.012% (rank 110)' in note, note
    assert 'the baseline wrote " cat" (61%). A token the baseline model would not write.' in note and note.startswith("decisive")
    assert "regression" in detail.locator(".cat-head").inner_text(), "counted on decisive_divergence, as the summary decided"
    row = detail.locator("table.checks tr", has_text="decisive_divergence").inner_text()
    assert "no score" in row and "regression" in row, "the check the decision made of the divergence, with its outcome"
    samples = detail.locator("#case-likelihood .sample")
    assert samples.count() == 2 and "candidate" in samples.first.inner_text(), "the candidate's answer is the less likely one"
    page.fill("#f-search", "fmt-0")
    page.locator("#case-table tbody tr", has_text="fmt-0").click()
    page.wait_for_selector("#case-detail h3:text-is('fmt-0')")
    same = detail.locator("#case-likelihood .sample pre")
    assert same.count() == 2 and same.nth(0).text_content() == same.nth(1).text_content() == "The cat sat.", (
        "an identical pair, embedded once, shows on both sides"
    )
    assert detail.locator(".divergence-note").count() == 0
    page.fill("#f-search", "")
