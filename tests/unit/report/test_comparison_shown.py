"""A case's comparison record on the page lists the format features that changed, not all of them twice."""

from __future__ import annotations

import json
import re
from pathlib import Path

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response, Usage
from qualitycheck.core._store import RunStore
from qualitycheck.report import collect, render_html
from qualitycheck.verdict._summary import build_summary

ANSWERS = {"same": ("Fine.", "Fine."), "longer": ("Fine.", "Fine, and more.\n"), "alone": ("Fine.", None)}


def _run(folder: Path) -> RunStore:
    cases = [Case(id=i, category="qa", prompt=i) for i in ANSWERS]
    manifest = {"suite_fingerprint": "f", "suite_files": ["s.jsonl"], "cases": len(cases), "repeats": 1, "targets": {}}
    store = RunStore.create(folder, manifest, cases)
    for cid, texts in ANSWERS.items():
        for side, text in zip(("baseline", "candidate"), texts, strict=True):
            if text is not None:
                store.put_response(
                    Response(case_id=cid, target=side, fingerprint="f", text=text, finish_reason="stop", usage=Usage(completion_tokens=3))
                )
    return store


def test_only_changed_features_are_shown_per_side(tmp_path: Path) -> None:
    with _run(tmp_path / "run") as store:
        data = collect(store, build_summary(store))
        shown = {r.id: r.comparison[0] for r in data.rows}
        html = render_html(data)
    assert shown["same"] is not None and shown["same"]["identical"] is True and "format" not in shown["same"]
    changed = shown["longer"]["format"]  # type: ignore[index]
    assert set(changed) == {"baseline", "candidate"} and changed["baseline"].keys() == changed["candidate"].keys()
    assert {"chars", "trailing_newline", "trailing_whitespace"} <= changed["baseline"].keys()
    assert all(changed["baseline"][f] != changed["candidate"][f] for f in changed["baseline"])
    assert changed["baseline"]["chars"] == 5 and changed["candidate"]["chars"] == len("Fine, and more.\n")
    assert shown["alone"] is not None and "format" not in shown["alone"]  # one side: nothing to compare it with
    embedded = json.loads(re.search(r'id="qc-cases">(.*?)</script>', html, re.S).group(1))  # type: ignore[union-attr]
    assert {c["i"]: c["x"][0].get("format") for c in embedded}["longer"] == changed
    assert "code_fence" not in json.dumps(embedded)  # the same on every side of every case here: on no case's record
