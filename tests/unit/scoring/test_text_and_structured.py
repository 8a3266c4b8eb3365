"""Exact/regex/contains, JSON and config-file scorers, driven by fixture rows."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import check_row, load_rows


@pytest.mark.parametrize("row", load_rows("text.jsonl"))
def test_text_checks(row: dict[str, Any]) -> None:
    check_row(row)


@pytest.mark.parametrize("row", load_rows("json.jsonl"))
def test_json_checks(row: dict[str, Any]) -> None:
    check_row(row)


@pytest.mark.parametrize("row", load_rows("config.jsonl"))
def test_config_file_checks(row: dict[str, Any]) -> None:
    check_row(row)


@pytest.mark.parametrize("row", load_rows("jsonschema_suite.jsonl"))
def test_json_schema_agrees_with_the_official_test_suite(row: dict[str, Any]) -> None:
    check_row(row)


@pytest.mark.parametrize("row", load_rows("sql.jsonl"))
def test_sql_checks(row: dict[str, Any]) -> None:
    check_row(row)
