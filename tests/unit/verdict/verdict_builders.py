"""Build small run stores in memory-light SQLite files, without any endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._records import ErrorInfo, Response, Score, Usage
from qualitycheck.core._store import RunStore


def make_store(
    folder: Path,
    rows: list[dict[str, Any]],
    *,
    targets: tuple[str, ...] = ("baseline", "candidate"),
    repeats: int = 1,
) -> RunStore:
    """rows: {id, category, route?, params?, texts: {target: text | list per repeat}, checks: {check: {target: status | list}}}.

    A row's `repeats` overrides the store's for that case (sampled cases are asked more often than greedy ones), and
    a row's `targets` the sides that answered it (the baseline asked again only where the candidate diverged).
    """
    cases = [
        Case(
            id=r["id"],
            category=r["category"],
            messages=[{"role": "user", "content": r["id"]}],
            tags={"route": r["route"]} if "route" in r else {},
            params=r.get("params", {}),
        )
        for r in rows
    ]
    manifest = {
        "suite_fingerprint": "test",
        "suite_files": ["t.jsonl"],
        "cases": len(cases),
        "targets": {t: {"url": f"http://{t}", "model": "m"} for t in targets},
        "repeats": repeats,
    }
    store = RunStore.create(folder, manifest, cases)
    scores = []
    for r in rows:
        for t in r.get("targets", targets):
            texts = r.get("texts", {}).get(t, "same")
            for rep in range(r.get("repeats", repeats)):
                text = texts[rep] if isinstance(texts, list) else texts
                err = None
                if text is None:
                    err, text = ErrorInfo(kind="http_status", message="503", status=503), ""
                store.put_response(
                    Response(
                        case_id=r["id"],
                        target=t,
                        repeat=rep,
                        fingerprint="f",
                        text=text,
                        finish_reason="stop",
                        usage=Usage(completion_tokens=len(text.split())),
                        token_ids=r.get("tokens", {}).get(t),
                        error=err,
                    )
                )
                for check, per in r.get("checks", {}).items():
                    st = per.get(t)
                    if st is None:
                        continue
                    st = st[rep] if isinstance(st, list) else st
                    scores.append(Score(case_id=r["id"], target=t, repeat=rep, check=check, status=st))
    store.replace_scores(scores)
    return store
