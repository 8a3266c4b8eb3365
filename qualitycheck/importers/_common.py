"""What every importer shares: the items it yields, the options it reads, and the one writer of the suite.

An importer reads another tool's eval set and yields, in source order,
`Drafted` cases (a case object in Contract 1's shape, with where it came
from), `Unmapped` constructs (an assert, a scorer, a prompt feature or a
field that has no faithful qualitycheck equivalent) and `Problem`s (input
that is wrong whatever the mapping). `write_suite` then validates every
case as `qualitycheck validate` would, and writes the suite only when
nothing was refused: an unmapped construct is never dropped silently. With
`skip_unmapped` it is named as skipped and the rest is written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qualitycheck.core._cases import validate_case
from qualitycheck.core._errors import ConfigError, InputError, Problem

__all__ = [
    "HEADER",
    "Drafted",
    "ImportOptions",
    "ImportReport",
    "Note",
    "Unmapped",
    "regex_alternation",
    "stem_of",
    "write_suite",
]

HEADER = "// qualitycheck import"
"""The first line of every suite an import writes: a later import may replace such a file, never a hand-written one."""


@dataclass(frozen=True)
class ImportOptions:
    """What the `import` command's flags give an importer; each format reads its own and refuses the others'."""

    category: str | None = None
    """The category of every case (default: the source's name; `category_field` picks one per row)."""
    skip_unmapped: bool = False
    """Write what maps and name what does not as skipped (default: refuse the whole import, exit 2)."""
    prompt: str | None = None
    """promptfoo: the prompt template for a tests file without a config (`file://PATH` or the text itself)."""
    registry: str | None = None
    """OpenAI evals: the registry YAML holding the eval's entry."""
    eval_name: str | None = None
    """OpenAI evals: the eval's name in the registry (`born-first`, or its id `born-first.dev.v0`)."""
    split: str | None = None
    """Hugging Face datasets: the split of a DatasetDict."""
    prompt_field: str | None = None
    reference_field: str | None = None
    id_field: str | None = None
    category_field: str | None = None
    check: str | None = None
    """Hugging Face datasets: how the reference is checked (`exact`, `contains`, `icontains`)."""


@dataclass(frozen=True)
class Drafted:
    """One case an importer made: the object written to the suite, and the source position it came from."""

    case: dict[str, Any]
    path: str
    line: int | None
    field: str = ""
    """Where in the source the case is (`tests[3]`); problems with the case itself are reported there."""
    unmapped: tuple[Problem, ...] = ()
    """Constructs of this source case left out of `case` (its checks): refused unless skipping."""


@dataclass(frozen=True)
class Unmapped:
    """A source case that cannot become a case at all (its prompt, its request): refused unless skipping."""

    problem: Problem


@dataclass(frozen=True)
class Note:
    """Something the user must know about a mapping that is made (an approximation, said once per import)."""

    message: str


Item = Drafted | Unmapped | Problem | Note


@dataclass
class ImportReport:
    """What an import wrote and what it left out, for the command's summary."""

    out: Path
    cases: int = 0
    categories: dict[str, int] = field(default_factory=dict)
    skipped: list[Problem] = field(default_factory=list)
    """Constructs named and left out (only with `skip_unmapped`)."""
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        cats = ", ".join(f"{k} {v}" for k, v in sorted(self.categories.items()))
        out = [f"qualitycheck: wrote {self.cases} case(s) to {self.out} ({cats or 'no category'})"]
        out += [f"note: {n}" for n in self.notes]
        out += [f"{p} (skipped)" for p in self.skipped]
        return out


def stem_of(src: str | Path) -> str:
    """A source's name as a category or id prefix: `promptfooconfig.yaml` → `promptfooconfig`, `org/name` → `org_name`."""
    name = Path(str(src).rstrip("/")).name
    stem = name.split(".", 1)[0] if "." in name and not name.startswith(".") else name
    return re.sub(r"[^\w.-]+", "_", stem or str(src)).strip("_") or "imported"


def regex_alternation(literals: Iterable[str]) -> str:
    """`(?:a|b)` matching exactly these strings (escaped), longest first so no literal is cut by a shorter one."""
    parts = sorted({re.escape(s) for s in literals}, key=lambda s: (-len(s), s))
    return "(?:" + "|".join(parts) + ")"


def _check_out(out: Path) -> None:
    if out.suffix != ".jsonl":
        raise ConfigError([Problem("command line", None, "--out", f"expected a .jsonl suite file, got {str(out)!r}")])
    if out.is_dir():
        raise ConfigError([Problem(str(out), None, "--out", "is a folder: give the .jsonl file to write")])
    if out.exists():
        try:
            with out.open(encoding="utf-8") as f:
                first = f.readline()
        except (OSError, UnicodeDecodeError):
            first = ""
        if not first.startswith(HEADER):
            raise ConfigError(
                [
                    Problem(
                        str(out),
                        None,
                        "--out",
                        "exists and was not written by `qualitycheck import`: give a new file (it is never overwritten)",
                    )
                ]
            )


def write_suite(items: Iterable[Item], out: Path, source: str, options: ImportOptions) -> ImportReport:
    """Validate every drafted case and write the suite, or raise `InputError` naming every refused thing.

    Cases are validated against `out`'s folder (where `validate` will read
    them) and written in source order, one per line, after a header naming
    the source. The file is replaced whole (a temporary file renamed), so
    a refused import leaves an earlier one in place.
    """
    out = Path(out)
    _check_out(out)
    report = ImportReport(out)
    problems: list[Problem] = []
    refused: list[Problem] = []
    lines: list[str] = []
    first_at: dict[str, str] = {}
    for item in items:
        if isinstance(item, Note):
            if item.message not in report.notes:
                report.notes.append(item.message)
            continue
        if isinstance(item, Problem):
            problems.append(item)
            continue
        if isinstance(item, Unmapped):
            refused.append(item.problem)
            continue
        refused.extend(item.unmapped)
        case_problems: list[Problem] = []
        case = validate_case(item.case, out, len(lines) + 2, case_problems)
        if case_problems or case is None:
            problems += [
                Problem(
                    item.path, item.line, item.field, f"the case made from it is not valid: {_join('', p.field) or 'case'}: {p.message}"
                )
                for p in case_problems
            ]
            continue
        if case.id in first_at:
            problems.append(
                Problem(item.path, item.line, _join(item.field, "id"), f"duplicate case id {case.id!r} (first from {first_at[case.id]})")
            )
            continue
        first_at[case.id] = f"{item.path}:{item.line}" if item.line else item.path
        lines.append(json.dumps(item.case, ensure_ascii=False, separators=(",", ":")))
        report.categories[case.category] = report.categories.get(case.category, 0) + 1
    refused = list(dict.fromkeys(refused))  # one assert under several prompts is one refusal
    problems = list(dict.fromkeys(problems))
    if problems or (refused and not options.skip_unmapped):
        hint = (
            []
            if not refused or options.skip_unmapped
            else [Problem("command line", None, "--skip-unmapped", "would write the rest and list these as skipped")]
        )
        raise InputError(sorted(problems + refused, key=lambda p: (p.path, p.line or 0)) + hint)
    if not lines:
        raise InputError([Problem(source, None, "", "holds no case to import")])
    report.skipped = refused
    report.cases = len(lines)
    _write(out, [f"{HEADER} from {source}: re-run the import to refresh it; edits here are replaced", *lines])
    return report


def _join(prefix: str, fld: str) -> str:
    if not prefix:
        return fld
    if not fld:
        return prefix
    return prefix + (fld if fld.startswith("[") else "." + fld)


def _write(out: Path, lines: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".import-", suffix=".jsonl", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
