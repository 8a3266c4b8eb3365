"""GitHub Actions: the sign-off in the job's summary, and each counted regression as an error on its suite line.

Under Actions (`GITHUB_ACTIONS=true`), `qualitycheck run` and `gate DIR`
append signoff.md to the file `GITHUB_STEP_SUMMARY` names, and print one
`::error file=…,line=…,title=…::message` workflow command per regressed
case that counts against the quality guardrail (summary.json's
`regressions` less `tolerated`), pointing at the suite file and line the
case was read from (kept in the run store, so `gate DIR` needs only the
folder). Values are escaped as the Actions toolkit escapes them
(`escapeData`, `escapeProperty` in @actions/core's command.ts).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from qualitycheck.core._store import RunStore
from qualitycheck.report._signoff import SIGNOFF_NAME
from qualitycheck.verdict._model import Summary, read_summary

__all__ = ["MAX_ANNOTATIONS", "error_commands", "escape_data", "escape_property", "github_actions"]

MAX_ANNOTATIONS = 50
"""GitHub shows at most 10 error annotations per step and 50 per job: past this the rest are counted in one notice."""


def escape_data(text: str) -> str:
    """A workflow command's message: `%`, CR and LF encoded, so a line break cannot end the command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: as data, and `:` and `,` too (they separate properties)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _counted(summary: Summary) -> dict[str, list[tuple[str, str]]]:
    """case id → (category, check) of every regression that counts, in summary order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for cat, c in summary.categories.items():
        for name, check in c.checks.items():
            for case_id in check.counted:
                out.setdefault(case_id, []).append((cat, name))
    return out


def _relative(file: str, workspace: str | None) -> str:
    """The path GitHub resolves from the repository root: an absolute path inside the workspace is made relative to it."""
    p = Path(file)
    if workspace and p.is_absolute():
        try:
            return p.relative_to(workspace).as_posix()
        except ValueError:
            return file
    return p.as_posix()


def error_commands(summary: Summary, store: RunStore, workspace: str | None = None) -> list[str]:
    """One `::error` command per counted regressed case (at most MAX_ANNOTATIONS, then a notice)."""
    counted = _counted(summary)
    places = store.case_locations(counted)
    lines: list[str] = []
    for case_id, where in counted.items():
        if len(lines) == MAX_ANNOTATIONS:
            rest = len(counted) - MAX_ANNOTATIONS
            lines.append(
                f"::notice title={escape_property('qualitycheck')}::{escape_data(f'{rest} more regressed case(s): see report.html')}"
            )
            break
        checks = ", ".join(sorted({check for _, check in where}))
        category = where[0][0]
        file, line = places.get(case_id, (None, None))
        props = [f"file={escape_property(_relative(file, workspace))}"] if file else []
        if file and line:
            props.append(f"line={line}")
        props.append(f"title={escape_property(f'qualitycheck: {case_id} regressed ({checks})')}")
        message = (
            f"case {case_id} ({category}): {checks} passed on the baseline and failed on the candidate; "
            f"it counts against the quality guardrail (verdict {summary.verdict})"
        )
        lines.append(f"::error {','.join(props)}::{escape_data(message)}")
    return lines


def github_actions(folder: Path, env: Mapping[str, str] | None = None, out: TextIO | None = None) -> bool:
    """Under GitHub Actions, write the step summary and the annotations of the run in `folder`; False elsewhere."""
    import sys

    env = os.environ if env is None else env
    if env.get("GITHUB_ACTIONS") != "true":
        return False
    out = sys.stdout if out is None else out
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    signoff = folder / SIGNOFF_NAME
    if step_summary and signoff.is_file():
        with open(step_summary, "a", encoding="utf-8") as f:
            f.write(signoff.read_text(encoding="utf-8").rstrip("\n") + "\n\n")
    summary = read_summary(folder / "summary.json")
    with RunStore.open(folder) as store:
        for line in error_commands(summary, store, env.get("GITHUB_WORKSPACE")):
            print(line, file=out)
    out.flush()
    return True
