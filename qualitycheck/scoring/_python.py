"""`python`: a user's own business rule, a function named in the case.

    "checks": {"python": [{"name": "no_competitor", "function": "my_rules:no_competitor",
                           "args": {"names": ["Acme"]}}]}

The function is called once per answer as `function(answer, case, args)`:
the answer text, a deep copy of the case (a frozen model: reading it is
fine, changing it changes nothing) and a copy of `args`. It returns a bool,
or a `(bool, reason)` pair whose reason is kept in the score's detail and
shown in the report next to the case. Scores are stored under `name`, so a
custom check is listed, compared and gated like a built-in one.

A function that raises, cannot be imported, or returns anything else scores
`error` with the reason: a broken rule never passes an answer.

Where `module` is looked for, first match wins: the suite file's folder (or
`folder`, relative to the suite file), the current folder, then the
installed packages. A module found in a folder is imported under a name
private to that folder (`_qualitycheck_user_<hash>.my_rules`), so two
suites with a `my_rules.py` each get their own; the folder is on `sys.path`
only while the module is imported (so `import helpers` of a sibling file
works; such siblings are ordinary top-level modules, shared by name).

The module is imported when the suite is validated, so a wrong module or
function name is a `path:line: field: message` problem before any request.
The function runs in the qualitycheck process (it is the user's own code,
not sandboxed) and may be called from several scoring threads at once.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import threading
import traceback
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, RootModel, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from qualitycheck.core._cases import Case
from qualitycheck.core._checks import check_registry
from qualitycheck.core._records import Response
from qualitycheck.scoring._base import BrokenScorer, CheckSpec, LoadContext, Outcome, Scorer, check_family

__all__ = ["PythonCheck", "PythonChecks", "PythonScorer", "load_function"]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_FUNCTION = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_REASON_CHARS = 2000


class PythonCheck(CheckSpec):
    """One custom check: its name, the function deciding it, and the arguments it gets."""

    name: str
    """The check name in scores, summary.json and the pytest gate; letters, digits, `_` and `-`."""
    function: str
    """`module:function` (`my_rules:no_competitor`, `pkg.rules:Rules.check`)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Passed to the function as its third argument."""
    folder: str | None = None
    """Folder `module` is looked for in first, relative to the suite file (default: the suite file's
    folder); the loader stores it as an absolute path."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a check name: start with a letter, then letters, digits, _ or -")
        owner = check_registry.reserved_names().get(v)
        if owner is not None:
            raise ValueError(f"check name {v!r} is a built-in check name (checks.{owner}); choose another")
        return v

    @field_validator("function")
    @classmethod
    def _function(cls, v: str) -> str:
        if not _FUNCTION.fullmatch(v):
            raise ValueError(f"expected 'module:function' (like 'my_rules:no_competitor'), got {v!r}")
        return v


class PythonChecks(RootModel[list[PythonCheck]]):
    """The `python` key: a list of custom checks (one object is a list of one)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _one(cls, data: Any) -> Any:
        return [data] if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _unique(self) -> PythonChecks:
        first: dict[str, int] = {}
        errors: list[InitErrorDetails] = []
        for i, c in enumerate(self.root):
            if c.name in first:
                errors.append(
                    InitErrorDetails(
                        type=PydanticCustomError(
                            "check_name_collision", f"check name {c.name!r} is also produced by checks.python[{first[c.name]}]"
                        ),
                        loc=(i, "name"),
                        input=c.name,
                    )
                )
            first.setdefault(c.name, i)
        if errors:
            raise ValidationError.from_exception_data("PythonChecks", errors)
        return self


class _LoadError(Exception):
    """The module or function of a custom check cannot be loaded; the message says why."""


_import_lock = threading.RLock()


def _folder_package(base: Path) -> str:
    """A package private to `base` whose submodules are the folder's modules."""
    name = "_qualitycheck_user_" + hashlib.sha256(str(base).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(base)]
        pkg = importlib.util.module_from_spec(spec)
        pkg.__doc__ = f"qualitycheck custom checks from {base}"
        sys.modules[name] = pkg
    return name


def _import_from(base: Path, module: str) -> types.ModuleType:
    package = _folder_package(base)
    added = str(base) not in sys.path
    if added:
        sys.path.insert(0, str(base))  # only while importing: sibling `import helpers` resolves here
    try:
        return importlib.import_module(f"{package}.{module}")
    except (Exception, SystemExit) as exc:
        raise _LoadError(f"importing {module} from {base} failed: {_one_line(exc)}") from None
    finally:
        if added:
            sys.path.remove(str(base))


def _import(module: str, folder: Path | None) -> types.ModuleType:
    top = module.partition(".")[0]
    bases = [b for b in (folder, Path.cwd()) if b is not None]
    for base in bases:
        if (base / f"{top}.py").is_file() or (base / top).is_dir():
            return _import_from(base.resolve(), module)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == top:
            where = ", ".join(str(b) for b in dict.fromkeys(bases))
            raise _LoadError(f"no module {module!r} in {where} or the installed packages") from None
        raise _LoadError(f"importing {module} failed: {_one_line(exc)}") from None
    except (Exception, SystemExit) as exc:
        raise _LoadError(f"importing {module} failed: {_one_line(exc)}") from None


def load_function(ref: str, folder: Path | None = None) -> Callable[..., Any]:
    """The callable `module:function` names, looked for in `folder`, the current folder, then installed packages.

    Raises `_LoadError` with a message for the user (module missing, import
    failing, no such attribute, not callable).
    """
    module, _, attr = ref.partition(":")
    with _import_lock:
        mod = _import(module, folder)
    obj: Any = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _LoadError(f"module {module} ({mod.__file__}) has no {attr!r}") from None
    if not callable(obj):
        raise _LoadError(f"{ref} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def _one_line(exc: BaseException) -> str:
    """`KeyError: 'x'` on one line, however many lines the exception's text has."""
    text = " ".join(str(exc).split()) if type(exc) is not KeyError else repr(exc.args[0]) if exc.args else ""
    return f"{type(exc).__name__}: {text}"[:_REASON_CHARS] if text else type(exc).__name__


def _is_bool(x: Any) -> bool:
    return isinstance(x, bool) or (type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_"))


def _verdict(result: Any) -> tuple[bool, str | None] | None:
    """(passed, reason) from a bool or a (bool, str) pair; None for anything else."""
    if _is_bool(result):
        return bool(result), None
    if isinstance(result, tuple) and len(result) == 2 and _is_bool(result[0]) and isinstance(result[1], str):
        return bool(result[0]), result[1][:_REASON_CHARS]
    return None


class PythonScorer:
    """Calls the user's function once per answer; see the module doc for the contract."""

    def __init__(self, spec: PythonCheck, function: Callable[..., Any], case: Case):
        self.check = spec.name
        self.spec = spec
        self._function = function
        self._case = case

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        detail: dict[str, Any] = {"function": self.spec.function}
        try:
            result = self._function(answer.text, self._case.model_copy(deep=True), copy.deepcopy(self.spec.args))
        except (Exception, SystemExit) as exc:  # the user's code: any failure is this check's error, never a pass
            frames = traceback.extract_tb(exc.__traceback__)[1:]  # the first is this call
            home = getattr(getattr(self._function, "__code__", None), "co_filename", None)
            mine = [f for f in frames if f.filename == home] or frames
            if mine:  # the user's line that failed, not a library's
                detail["where"] = f"{Path(mine[-1].filename).name}:{mine[-1].lineno}: {(mine[-1].line or '').strip()}"
            return Outcome("error", None, {**detail, "reason": f"{self.spec.function} raised {_one_line(exc)}"[:_REASON_CHARS]})
        verdict = _verdict(result)
        if verdict is None:
            shown = repr(result)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            return Outcome(
                "error",
                None,
                {
                    **detail,
                    "reason": f"{self.spec.function} returned {shown} ({type(result).__name__}); expected a bool or a (bool, str) pair",
                },
            )
        passed, reason = verdict
        if reason:
            detail["reason"] = reason
        return Outcome("pass" if passed else "fail", passed, detail)


# ------------------------------------------------------------ the family


def _folder(spec: PythonCheck, case: Case) -> Path | None:
    if spec.folder is not None:
        return Path(spec.folder).resolve()
    return Path(case.file).resolve().parent if case.file else None


def _load_python(spec: PythonChecks, ctx: LoadContext) -> PythonChecks:
    """Resolve each check's folder against the suite file and import its function now, not mid-run."""
    out: list[PythonCheck] = []
    for i, c in enumerate(spec.root):
        folder = (ctx.folder / (c.folder or ".")).resolve()
        if not folder.is_dir():
            ctx.problem(f"[{i}].folder", f"no folder {folder}")
        else:
            try:
                load_function(c.function, folder)
            except _LoadError as exc:
                ctx.problem(f"[{i}].function", f"cannot load {c.function}: {exc}")
        out.append(c.model_copy(update={"folder": str(folder)}))
    return PythonChecks(out)


@check_family("python", spec=PythonChecks, names=(), produces=lambda spec: [c.name for c in spec.root], load=_load_python)
def python_family(spec: PythonChecks, case: Case) -> Sequence[Scorer]:
    out: list[Scorer] = []
    for c in spec.root:
        try:
            out.append(PythonScorer(c, load_function(c.function, _folder(c, case)), case))
        except _LoadError as exc:  # this check errors on every answer; the case's other checks still run
            out.append(BrokenScorer(c.name, f"cannot load {c.function}: {exc}"))
    return out
