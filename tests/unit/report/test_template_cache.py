"""The page's template is compiled once, then loaded compiled by later processes (as Python loads .pyc files)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import jinja2
import pytest

from qualitycheck.report import _html


def test_a_second_process_loads_the_compiled_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # jinja's cache folder lives under the temporary directory
    compiled: list[str | None] = []
    real = jinja2.Environment._compile

    def spy(self: jinja2.Environment, source: str, filename: str | None) -> Any:
        compiled.append(filename)
        return real(self, source, filename)

    monkeypatch.setattr(jinja2.Environment, "_compile", spy)
    _html._env.cache_clear()  # a fresh environment, as a new process makes
    first = _html._env().get_template("report.html.j2")
    _html._env.cache_clear()
    second = _html._env().get_template("report.html.j2")
    _html._env.cache_clear()
    assert len(compiled) == 1 and first is not second
    assert any(p.name.startswith("_jinja2-cache") and any(p.iterdir()) for p in tmp_path.iterdir())


def test_without_a_cache_folder_the_template_is_compiled_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise RuntimeError("Unable to create a writable cache directory")

    monkeypatch.setattr(jinja2.FileSystemBytecodeCache, "__init__", refuse)
    _html._env.cache_clear()
    try:
        assert _html._env().bytecode_cache is None
        assert _html._env().get_template("report.html.j2") is not None
    finally:
        _html._env.cache_clear()
