"""Shared by the importer tests: the fixture files and one import through the command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qualitycheck.cli._main import main
from qualitycheck.core._cases import Case, load_suite

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imports"


def run_import(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`qualitycheck import ...` in this process: (exit code, stdout, stderr)."""
    code = main(["import", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def imported(path: Path) -> dict[str, Case]:
    """The suite an import wrote, read back as `qualitycheck validate` reads it, by id."""
    return {c.id: c for c in load_suite([path])}


def checks(case: Case) -> dict[str, Any]:
    return dict(case.model_dump(mode="json", by_alias=True, exclude_none=True)["checks"])
