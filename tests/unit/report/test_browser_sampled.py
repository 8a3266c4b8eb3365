"""report.html in headless Chromium for a run with sampled cases: the category header says what the run promises.

A release manager reads the verdict in the browser, so what decided a
sampled category (its distribution test) and what the run can promise (the
drop it detects; how far identical answers generalise) must be on the page,
next to the verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli import main
from qualitycheck.testserver import TestServer
from tests.helpers import in_thread, run_argv, write_suite
from tests.unit.verdict.test_sampled_run import _sampled_cases, _sampler, _spread

pytestmark = pytest.mark.browser


def _cases() -> list[dict[str, Any]]:
    greedy = [
        {"id": f"g{i}", "category": "qa", "messages": [{"role": "user", "content": f"say it {i}"}], "checks": {"contains": "42"}}
        for i in range(30)
    ]
    return [*_sampled_cases(30), *_sampled_cases(4, category="tiny"), *greedy]


def test_the_page_shows_the_sampled_test_and_what_each_category_promises(chromium: Any, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s.jsonl", _cases())
    says = {f"say it {i}": "It is 42." for i in range(30)}
    cfg = tmp_path / "qc.yaml"
    cfg.write_text("run:\n  max_samples_per_case: 4\n", encoding="utf-8")
    broken, same = _sampler(lambda i: _spread(i) - 0.45), _sampler(lambda i: 0.5)

    def candidate(body: dict[str, Any]) -> str:  # json drops; the four tiny cases answer as the baseline does
        return same(body) if body["messages"][0]["content"].startswith("tiny") else broken(body)

    base, tiny = _sampler(_spread), _sampler(lambda i: 0.5)

    def baseline(body: dict[str, Any]) -> str:
        return tiny(body) if body["messages"][0]["content"].startswith("tiny") else base(body)

    with TestServer(default=baseline, answers=says) as b, TestServer(default=candidate, answers=says) as c:
        in_thread(main, run_argv(b.url, c.url, suite, tmp_path / "run", "-c", str(cfg)))
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    try:
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((tmp_path / "run" / "report.html").as_uri())
        cats = {page.locator(".cat h3").nth(i).inner_text(): page.locator(".cat").nth(i) for i in range(page.locator(".cat").count())}
        qa = cats["qa"].locator("[data-role=power]").inner_text()
        assert "30 of 30 greedy cases identical: at most 9.5% of such requests differ" in qa, qa
        json_cat = cats["json"]
        assert json_cat.locator(".badge.fail").first.is_visible()
        row = json_cat.locator("tr.sampled").first.inner_text()
        assert "pass rate dropped" in row and "30 sampled cases" in row and "largest drops" in row, row
        assert "detects a pass-rate drop of" in json_cat.locator("[data-role=power]").inner_text()
        tiny = cats["tiny"]
        assert "What would decide it" in tiny.locator(".would-decide").inner_text()
        assert "undecided" in tiny.locator("tr.sampled").first.inner_text()
        assert not errors, errors
    finally:
        page.close()
