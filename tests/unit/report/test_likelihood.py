"""What report.html shows of the likelihood evidence: each category's cell beside its verdict, each case's answers under
the baseline model with their least likely tokens placed in the text, each greedy divergence with both probabilities."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._records import LikelihoodRecord, LikelihoodStage, Response, TokenLogprob, Usage
from qualitycheck.core._store import RunStore
from qualitycheck.report import collect, render_html
from qualitycheck.report._data import sample_view
from qualitycheck.verdict._model import Summary
from qualitycheck.verdict._summary import build_summary

from .conftest import DECISIVE, UNLIKELY_XSS


def _record(text_tokens: list[tuple[str | None, float]], *, least: int = 5, **extra: Any) -> LikelihoodRecord:
    """A scored record of an answer made of these (decoded text, logprob) tokens, its `least` least likely listed."""
    logprobs = [lp for _, lp in text_tokens]
    order = sorted(range(len(logprobs)), key=lambda i: logprobs[i])[:least]
    body: dict[str, Any] = {
        "case_id": "c",
        "target": "candidate",
        "fingerprint": "f",
        "answer": "a",
        "scorer": "http://s m",
        "status": "scored",
        "tokens_from": "token_ids",
        "tokens": len(logprobs),
        "sum_logprob": sum(logprobs),
        "mean_logprob": sum(logprobs) / len(logprobs) if logprobs else None,
        "token_logprobs": logprobs,
        "token_ranks": [1] * len(logprobs),
        "least_likely": [TokenLogprob(position=i, token_id=i, text=text_tokens[i][0], logprob=logprobs[i], rank=50) for i in order],
    }
    return LikelihoodRecord.model_validate({**body, **extra})


def _marks(view: Any, text: str) -> dict[int, str | None]:
    """position → the characters a least likely token is marked on (None: listed beside the text)."""
    _, _, marks = view
    chars = list(text)  # code points, as the page slices them
    return {m[0]: "".join(chars[m[3] : m[4]]) if len(m) == 5 else None for m in marks}


def test_least_likely_tokens_are_placed_on_their_own_characters_not_an_earlier_twin() -> None:
    pieces = ["the", " cat", " saw", " the", " dog", " by", " the", " 🙂", " gate", "\ufffd", " \n"]
    logprobs = [-0.1, -0.2, -0.3, -0.2, -0.3, -0.4, -6.0, -0.1, -7.0, -9.0, -8.0]
    text = "".join(p for p in pieces if p != "\ufffd")  # the split character's bytes decode to nothing in the text
    view = sample_view(_record(list(zip(pieces, logprobs, strict=True))), text)
    assert isinstance(view, list)
    marks = _marks(view, text)
    assert set(marks) == {9, 8, 10, 6, 5}, "the five least likely tokens, by position"
    assert marks[6] == " the" and view[2][[m[0] for m in view[2]].index(6)][3] == text.index(" the", text.index(" by")), (
        "the third ' the', not the first"
    )
    assert marks[8] == " gate", "placed after a character outside the BMP, in code points"
    assert marks[9] is None and view[2][[m[0] for m in view[2]].index(9)][3] == "\ufffd", "not in the text: listed with its text"
    assert marks[10] is None, "whitespace alone is listed, not marked"
    assert view[0] == round(sum(logprobs) / len(logprobs), 2) and view[1] == len(pieces)


def test_an_answer_is_embedded_as_its_mean_and_its_least_likely_tokens_only() -> None:
    """The page holds thousands of answers: not every token's log-probability, whatever the answer's length."""
    pieces = [(f" w{i}", -0.01 * (i % 50)) for i in range(2_000)]
    text = "".join(p for p, _ in pieces)
    view = sample_view(_record(pieces), text)
    assert isinstance(view, list) and len(view[2]) == 5
    assert len(json.dumps(view)) < 200
    assert all(m[1] == round(m[1], 2) for m in view[2]), "log-probabilities to 0.01 nats"


def test_an_answer_that_was_not_scored_says_why() -> None:
    assert sample_view(None, "text") == "not scored"
    too_long = _record([], status="too_long", reason="no room", mean_logprob=None)
    assert "do not fit the scorer's context" in str(sample_view(too_long, "text"))
    failed = _record([], status="error", reason="HTTP 500: boom", mean_logprob=None)
    assert sample_view(failed, "text") == "not scored: the scorer failed (HTTP 500: boom)"
    assert sample_view(_record([("x", -1.0)]), None) is None, "no answer (an error): nothing to score"


def _embedded(html: str) -> list[dict[str, Any]]:
    block = re.search(r'<script type="application/json" id="qc-cases">(.*?)</script>', html, re.S)
    assert block is not None
    cases: list[dict[str, Any]] = json.loads(block.group(1))
    return cases


def test_the_page_of_the_run_embeds_every_sample_and_each_divergence(likelihood_run: Path) -> None:
    """report.html as the run wrote it (the rows from the summary's own walk) and as `collect` rebuilds it agree."""
    written = {c["i"]: c for c in _embedded((likelihood_run / "report.html").read_text(encoding="utf-8"))}
    with RunStore.open(likelihood_run) as store:
        summary = Summary.model_validate_json((likelihood_run / "summary.json").read_text(encoding="utf-8"))
        rebuilt = {r.id: r.compact() for r in collect(store, summary).rows}
        texts = {(r.case_id, r.target, r.repeat): r.text for r in store.responses()}
    assert written == rebuilt
    chat = written["chat-0"]
    assert [len(chat["t"][s]) for s in ("baseline", "candidate")] == [2, 2], "both samples of a sampled case, beyond the run's repeats"
    assert [len(chat["l"][s]) for s in ("baseline", "candidate")] == [2, 2]
    for side in ("baseline", "candidate"):
        for rep, view in enumerate(chat["l"][side]):
            mean, tokens, marks = view
            assert tokens == 3 and len(marks) == 3 and mean < 0
            text = texts[("chat-0", side, rep)]
            assert "".join(text[m[3] : m[4]] for m in marks) == text, "three tokens, each placed on its own characters"
    candidate = [t for t in chat["t"]["candidate"]] + [t for c in written.values() for t in c["t"].get("candidate", []) if t]
    assert any(UNLIKELY_XSS in t for t in candidate), "the run has the markup piece the browser test looks for"
    (div,) = written["fmt-2"]["v"]
    assert div["k"] == "decisive" and div["ct"] == " zq" and div["bt"] == " cat" and div["at"] == 1 and div["r"] == 0
    assert div["cp"] == pytest.approx(math.exp(-9.0)) and div["bp"] == pytest.approx(math.exp(-0.5)) and div["cr"] == 110
    assert written["fmt-2"]["t"]["candidate"] == [DECISIVE]
    assert "v" not in written["fmt-0"], "an identical greedy pair has no divergence"
    same = written["fmt-0"]["l"]
    assert isinstance(same["baseline"][0], list) and same["candidate"] == [True], "an identical pair's view is embedded once"
    assert isinstance(written["fmt-2"]["l"]["candidate"][0], list)


def _text(html: str) -> str:
    """What a reader sees of a piece of the page: tags dropped, entities decoded, spaces collapsed."""
    import html as html_lib

    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", html)))


def _card(html: str, name: str) -> str:
    start = html.index(f"<h3>{name}</h3>")
    end = html.find('<div class="cat"', start)
    return html[start : end if end >= 0 else html.index('id="cases-heading"')]


def test_the_category_card_shows_the_cell_beside_the_verdict_and_marks_what_failed_it(likelihood_run: Path) -> None:
    with RunStore.open(likelihood_run) as store:
        summary = Summary.model_validate_json((likelihood_run / "summary.json").read_text(encoding="utf-8"))
        data = collect(store, summary)
    cell = summary.categories["chat"].likelihood
    assert cell is not None and cell.bounds is not None and cell.p_value_holm is not None and cell.decision == "shift"
    html = render_html(data)
    chat = _card(html, "chat")
    head = chat[: chat.index("</div>")]
    assert '<span class="badge fail">fail</span>' in head and f"likelihood changed {cell.shift:+.2f} nats/token" in _text(head), (
        "the cell's decision next to the verdict"
    )
    block = chat[chat.index('<div class="likelihood') :]
    assert block.startswith('<div class="likelihood failed"')
    said = _text(block[: block.index('<table class="checks"')])
    assert said.startswith(" ✖ This failed the category: the candidate writes text the baseline model would rarely write.")
    assert (
        f"mean log-probability per token: baseline samples {cell.baseline_mean_logprob:+.2f} → candidate samples "
        f"{cell.candidate_mean_logprob:+.2f} nats, over 16 sampled cases × 2 samples per side" in said
    )
    assert f"shift {cell.shift:+.2f} [{cell.bounds[0]:+.2f}, {cell.bounds[1]:+.2f}] nats per token" in said
    assert f"p {cell.p_value:.2g}, Holm p {cell.p_value_holm:.2g}" in said
    assert f'href="#case={cell.largest_shifts[0].case_id}"' in block
    fmt = _card(html, "fmt")
    assert '<div class="divergences failed"' in fmt
    said = _text(fmt[fmt.index('<div class="divergences') :])
    assert "This failed the category: 1 greedy answer left the baseline's at a token the baseline model would not write." in said
    assert "1 decisive, 0 unclear, 0 near ties" in said
    assert (
        'fmt-2 1 " zq": the baseline gives the candidate\'s token 0.012% (rank 110) " cat": 61% 8.90 (its own top two 0.30 apart) '
        "decisive a token the baseline model would not write" in said
    )
    assert "test-model at " in _text(html) and "scored 73 of 73 answers" in _text(html)


def test_a_cell_that_found_no_shift_is_not_marked_as_failing_and_missing_evidence_says_why(likelihood_run: Path) -> None:
    with RunStore.open(likelihood_run) as store:
        summary = Summary.model_validate_json((likelihood_run / "summary.json").read_text(encoding="utf-8"))
        data = collect(store, summary)
    chat = summary.categories["chat"]
    assert chat.likelihood is not None and summary.likelihood is not None
    chat.likelihood = chat.likelihood.model_copy(update={"decision": "no_shift", "direction": None, "meaning": ""})
    chat.verdict = "pass"
    summary.likelihood = summary.likelihood.model_copy(update={"evaluated": False, "reason": "llama-server cannot score a given answer"})
    html = render_html(data)
    block = _card(html, "chat")
    assert "likelihood no shift" in _text(block) and "This failed the category" not in block and '<div class="likelihood"' in block
    stage = html[html.index('id="likelihood-stage"') :]
    stage = _text(stage[: stage.index("</p>")])
    assert "not evaluated Likelihood under the baseline model: llama-server cannot score a given answer" in stage


def test_records_of_another_scorer_or_of_an_answer_asked_again_are_not_shown(tmp_path: Path) -> None:
    """Only the records that describe the stored answers now (`verdict._likelihood.current_likelihoods`)."""
    manifest = {"suite_fingerprint": "f", "suite_files": [], "cases": 1, "repeats": 1, "targets": {}}
    store = RunStore.create(tmp_path / "run", manifest, [Case(id="c", category="qa", prompt="p")])
    for target, text in (("baseline", "The cat"), ("candidate", "The zq")):
        store.put_response(Response(case_id="c", target=target, fingerprint=f"fp-{target}", text=text, usage=Usage(completion_tokens=2)))
    scorer = "http://scorer m"
    rows = [
        (_record([("The", -0.1), (" cat", -0.5)], target="baseline", fingerprint="fp-baseline", scorer=scorer), "k1"),
        (_record([("The", -0.1), (" zq", -9.0)], target="candidate", fingerprint="fp-older", scorer=scorer), "k2"),
    ]
    store.put_likelihoods(rows)
    store.put_record(LikelihoodStage(scorer="http://scorer", model="m", evaluated=True, top_k=20, least_likely=5))
    summary = build_summary(store)
    (row,) = collect(store, summary).rows
    assert row.likelihood["baseline"][0][0] == pytest.approx(-0.3)
    assert row.likelihood["candidate"] == ["not scored"], "its record was made for an answer since asked again"
    store.put_likelihoods(
        [(_record([("The", -0.1), (" zq", -9.0)], target="candidate", fingerprint="fp-candidate", scorer="http://x m"), "k2")]
    )
    (row,) = collect(store, summary).rows
    assert row.likelihood["candidate"] == ["not scored"], "scored by another server than the stage's"
    store.close()
