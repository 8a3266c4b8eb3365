"""Errors a user can act on.

Every error that reaches the CLI carries a message written for the person who
has to fix the input, so the CLI prints it and exits with the right code
instead of showing a traceback::

    QualitycheckError                 exit 2 unless said otherwise
     ├── InputError                   bad suite, config or flag (exit 2)
     │    ├── SuiteError              one or more `path:line: field: message` problems
     │    └── ConfigError             config file or CLI flag problems
     ├── RunMismatchError             --out holds a run of other suites/targets (exit 2)
     ├── StoreError                   the run folder is missing or unreadable (exit 2)
     └── RunIncompleteError           the run could not complete (exit 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "ConfigError",
    "InputError",
    "Problem",
    "QualitycheckError",
    "RunIncompleteError",
    "RunMismatchError",
    "StoreError",
    "SuiteError",
    "first_problem",
]


class QualitycheckError(Exception):
    """Base of all errors meant for the user; `exit_code` is what the CLI returns."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One problem in an input file, printed in the conventional compiler form."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class InputError(QualitycheckError):
    """Input the user wrote is wrong; holds every problem found, not only the first."""

    def __init__(self, problems: list[Problem] | str):
        if isinstance(problems, str):
            problems = [Problem("<input>", None, "", problems)]
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class SuiteError(InputError):
    """A suite file has problems (unknown keys, wrong types, duplicate ids, ...)."""


class ConfigError(InputError):
    """The config file or a CLI flag has problems."""


class RunMismatchError(QualitycheckError):
    """Refuses to mix two different runs in one folder: the result would be meaningless."""


class StoreError(QualitycheckError):
    """The run folder cannot be read as a qualitycheck run."""


class RunIncompleteError(QualitycheckError):
    """Generation stopped before every request had an outcome (e.g. Ctrl-C)."""

    exit_code = 3


def first_problem(exc: ValidationError) -> str:
    """A stored record's validation failure in one line: `field.path: message`, and how many more there are.

    For records the tool wrote itself (summary.json, replay.json, a run's
    artifacts): one of them that does not validate was damaged or written by
    other code, and the first problem is what a person needs to find it.
    """
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"
