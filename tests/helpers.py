"""Builders shared by the tests: suites on disk (import as `tests.helpers`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_suite(path: Path, cases: list[dict[str, Any]]) -> Path:
    """Write cases as JSONL (or YAML when the name ends in .yaml)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        path.write_text(yaml.safe_dump(cases, sort_keys=False), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


def qa_cases(n: int, category: str = "qa", **extra: Any) -> list[dict[str, Any]]:
    return [
        {"id": f"{category}-{i}", "category": category,
         "messages": [{"role": "user", "content": f"question {category} {i}?"}], **extra}
        for i in range(n)
    ]
