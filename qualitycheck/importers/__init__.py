"""The eval sets teams already have → a suite: promptfoo tests, OpenAI evals samples, Hugging Face datasets, Inspect logs.

`qualitycheck import FORMAT SRC --out SUITE.jsonl` is `import_suite`: the
format's reader yields cases in Contract 1's shape with where each came
from, and `_common.write_suite` validates them as `qualitycheck validate`
does and writes them, refusing the whole import (exit 2) while any assert,
scorer, prompt feature or field has no faithful mapping, each named with
its file and position (`skip_unmapped` writes the rest and lists them).

The package sits beside `traffic` (the other way cases come in) and imports
only `core`; `datasets` and `inspect_ai` are optional extras imported by
their reader alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.importers._common import ImportOptions, ImportReport, Item, write_suite

__all__ = ["FORMATS", "READS", "ImportOptions", "ImportReport", "import_suite"]


def _promptfoo(src: Path, options: ImportOptions) -> Iterator[Item]:
    from qualitycheck.importers._promptfoo import read_promptfoo

    return read_promptfoo(src, options)


def _openai_evals(src: Path, options: ImportOptions) -> Iterator[Item]:
    from qualitycheck.importers._openai_evals import read_openai_evals

    return read_openai_evals(src, options)


def _hf_datasets(src: Path, options: ImportOptions) -> Iterator[Item]:
    from qualitycheck.importers._hf_datasets import read_hf_datasets

    return read_hf_datasets(src, options)


def _inspect(src: Path, options: ImportOptions) -> Iterator[Item]:
    from qualitycheck.importers._inspect import read_inspect_log

    return read_inspect_log(src, options)


FORMATS: dict[str, Callable[[Path, ImportOptions], Iterator[Item]]] = {
    "promptfoo": _promptfoo,
    "openai-evals": _openai_evals,
    "hf-datasets": _hf_datasets,
    "inspect": _inspect,
}
"""FORMAT of `qualitycheck import` → its reader (imported on first use: `datasets` and `inspect_ai` are extras)."""

READS: dict[str, frozenset[str]] = {
    "promptfoo": frozenset({"prompt"}),
    "openai-evals": frozenset({"registry", "eval_name"}),
    "hf-datasets": frozenset({"split", "prompt_field", "reference_field", "id_field", "category_field", "check"}),
    "inspect": frozenset(),
}
"""The format-specific options each reader reads (`category` and `skip_unmapped` are every format's); another is refused."""
_COMMON = frozenset({"category", "skip_unmapped"})


def _refuse_foreign(fmt: str, options: ImportOptions) -> None:
    given = [f.name for f in dataclasses.fields(options) if getattr(options, f.name) not in (None, False)]
    foreign = [name for name in given if name not in READS[fmt] | _COMMON]
    if foreign:
        flags = ["--" + ("eval" if n == "eval_name" else n.replace("_", "-")) for n in foreign]
        raise ConfigError([Problem("command line", None, flag, f"is not read by the {fmt} format") for flag in flags])


def import_suite(fmt: str, src: str | Path, out: str | Path, options: ImportOptions | None = None) -> ImportReport:
    """Read `src` in `fmt` and write the suite `out` (.jsonl); `InputError` names everything refused."""
    options = options or ImportOptions()
    _refuse_foreign(fmt, options)
    reader = FORMATS[fmt]
    return write_suite(reader(Path(src), options), Path(out), str(src), options)
