"""A pytest plugin that records every summary the tests build, to compare two versions of the verdict.

    QC_RECORD_SUMMARIES=DIR pytest -p tests.record_summaries tests/unit

Each test's summaries (in the order it built them) are written to
DIR/<test id>.json, without what differs from run to run (timings, ports,
temporary folders, GPU samples). Run it on two checkouts and compare the
folders with `python -m tests.record_summaries DIR_A DIR_B`: a restructure of
the decision must leave every file the same (p-values to 1e-12).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import json_diff

_PORT = re.compile(r"(127\.0\.0\.1|localhost):\d+")
_TMP = re.compile(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/\"' ]+")
_TIMING = re.compile(r"^.*(TTFT|TPOT|ITL|latency|ms\b|GPU).*\n?", re.MULTILINE)
_VOLATILE = ("latency", "gpu")

_recorded: list[dict[str, Any]] = []


def _steady(value: Any) -> Any:
    """The value with every string's ports, temporary folders and timing lines taken out."""
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    if isinstance(value, str):
        return _TIMING.sub("", _TMP.sub("TMP", _PORT.sub("HOST", value)))
    return value


@pytest.fixture(autouse=True)
def _record_summaries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    folder = os.environ.get("QC_RECORD_SUMMARIES")
    if not folder:
        yield
        return
    import qualitycheck.verdict._summary as mod

    real = mod.build_summary
    seen: list[dict[str, Any]] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        summary = real(*args, **kwargs)
        data = json.loads(summary.to_json_text())
        for key in _VOLATILE:
            data.pop(key, None)
        seen.append(_steady(data))
        return summary

    monkeypatch.setattr(mod, "build_summary", recording)
    yield
    if seen:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[:200]
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(seen, indent=1, sort_keys=True), encoding="utf-8")


def main(argv: list[str]) -> int:
    """Compare two recordings: every test both recorded, file by file; print what differs."""
    first, second = Path(argv[0]), Path(argv[1])
    names = sorted({p.name for p in first.glob("*.json")} | {p.name for p in second.glob("*.json")})
    differing = 0
    for name in names:
        a, b = first / name, second / name
        if not a.exists() or not b.exists():
            print(f"{name}: recorded by {'the second' if b.exists() else 'the first'} only")
            continue
        diffs = json_diff(json.loads(a.read_text()), json.loads(b.read_text()))
        if diffs:
            differing += 1
            print(f"{name}:\n  " + "\n  ".join(diffs[:12]))
    print(f"{len(names)} tests recorded summaries; {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
