"""Builders for judge tests: a run store filled by hand and a scripted judge server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._config import JudgeTarget, RunOptions
from qualitycheck.core._config_file import Config
from qualitycheck.core._records import ErrorInfo, Response
from qualitycheck.core._store import RunStore
from qualitycheck.judge._judge import JudgeOptions

_BLOCK = re.compile(r"<<<(reply(?: A| B)?|reference answer) (\w+)>>>\n(.*?)\n<<<end of \1 \2>>>", re.S)


def blocks(body: dict[str, Any]) -> dict[str, str]:
    """The fenced blocks of a judge request, by label ('reply A', 'reply B', 'reply', ...)."""
    text = "\n".join(m["content"] for m in body["messages"])
    return {m.group(1): m.group(3) for m in _BLOCK.finditer(text)}


def prefer(text: str, verdict_if_found: str = "[[A]]") -> Any:
    """A judge that picks the reply containing `text`, whatever its position."""

    def answer(body: dict[str, Any]) -> str:
        b = blocks(body)
        if text in b.get("reply A", ""):
            return "Reply A is more accurate. [[A]]"
        if text in b.get("reply B", ""):
            return "Reply B is more accurate. [[B]]"
        return "They are equal. [[TIE]]"

    return answer


def make_store(
    folder: Path,
    pairs: list[tuple[str, str, str]],
    judge: dict[str, Any] | None = None,
    category: str = "summaries",
    errors: dict[str, str] | None = None,
) -> RunStore:
    """One case per (id, baseline text, candidate text), each with the given judge check ({}: none)."""
    judge = judge if judge is not None else {"mode": "pairwise"}
    checks = {"judge": judge} if judge else {"exact": True}
    cases = [
        Case(id=cid, category=category, messages=[{"role": "user", "content": f"Summarise item {cid}."}], checks=checks)
        for cid, _, _ in pairs
    ]
    store = RunStore.create(folder, {"targets": {}, "repeats": 1, "suite_fingerprint": "t"}, cases)
    for cid, b, c in pairs:
        for target, text in (("baseline", b), ("candidate", c)):
            err = (errors or {}).get(f"{cid}:{target}")
            store.put_response(
                Response(
                    case_id=cid,
                    target=target,
                    fingerprint="f",
                    text="" if err else text,
                    error=ErrorInfo(kind="http_status", message=err, status=500) if err else None,
                )
            )
    return store


def judge_config(url: str, model: str = "judge-m", **run: Any) -> Config:
    return Config(judge=JudgeTarget(url=url, model=model), run=RunOptions(retries=0, **run))


def judge_stage(url: str, model: str = "judge-m", **run: Any) -> tuple[JudgeTarget, JudgeOptions]:
    """`score_judge`'s judge and options for `judge_config(url, model, **run)`, as the pipeline hands them."""
    cfg = judge_config(url, model, **run)
    assert cfg.judge is not None
    return cfg.judge, JudgeOptions.of_run(cfg.run)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"
