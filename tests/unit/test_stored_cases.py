"""Cases read back from the store are the cases stored, without validating them again until their checks are read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from qualitycheck.core._cases import Case
from qualitycheck.core._checks import Checks
from qualitycheck.core._store import RunStore

CASES: list[dict[str, Any]] = [
    {"id": "a", "category": "qa", "messages": [{"role": "user", "content": "q?"}], "checks": {"exact": "42", "contains": ["4"]}},
    {
        "id": "b",
        "category": "qa",
        "prompt": "p",
        "checks": {"json": {"schema": {"type": "object"}}, "regex": "\\d"},
        "tags": {"route": "r", "n": 3},
    },
    {
        "id": "c",
        "category": "tools",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        "params": {"temperature": 0.5},
    },
]


def _store(folder: Path) -> RunStore:
    cases = [Case.model_validate(c) for c in CASES]
    return RunStore.create(folder, {"suite_fingerprint": "f", "targets": {}, "repeats": 1}, cases)


def test_a_stored_case_reads_back_equal_with_its_checks_hash_and_names(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        read = {c.id: c for c in store.iter_cases()}
    for raw in CASES:
        stored, fresh = read[raw["id"]], Case.model_validate(raw)
        assert stored == fresh and stored.content_hash() == fresh.content_hash()
        assert stored.check_names() == fresh.check_names() and stored.route == fresh.route
        assert stored.model_dump(mode="json") == fresh.model_dump(mode="json")


def test_checks_are_validated_when_first_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    validate = Checks.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Checks], data: Any) -> Checks:
        seen.append(data)
        return validate(cls, data)  # type: ignore[no-any-return]

    with _store(tmp_path) as store:
        monkeypatch.setattr(Checks, "model_validate", classmethod(counting))
        cases = list(store.by_case())
        assert seen == []  # the walk after scoring never reads a case's checks
        assert cases[0].case.checks.exact is not None and len(seen) == 1
        assert cases[0].case.checks.names() == ["exact", "contains"] and len(seen) == 1  # once per case


def test_stored_checks_that_no_longer_validate_fail_where_they_are_read(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        body = json.loads(store._db.execute("SELECT body FROM cases WHERE id='a'").fetchone()[0])
        body["checks"]["no_such_family"] = True
        store._db.execute("UPDATE cases SET body=? WHERE id='a'", (json.dumps(body),))
        case = next(c for c in store.iter_cases() if c.id == "a")
        assert case.category == "qa"
        with pytest.raises(ValidationError, match="no_such_family"):
            _ = case.checks.exact
