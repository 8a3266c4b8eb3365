"""Cases and their checks, and loading suites with line-numbered problems.

A suite is a folder or file of `.jsonl` (one case per line) or `.yaml`/`.yml`
(a list of cases). Loading never stops at the first problem: it collects every
problem as `path:line: field: message` so a user fixes a suite in one pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import Problem, SuiteError

__all__ = [
    "Case",
    "Checks",
    "ContainsCheck",
    "ExactCheck",
    "JsonCheck",
    "JudgeCheck",
    "RegexCheck",
    "SqlCheck",
    "UnitTestsCheck",
    "YamlCheck",
    "load_suite",
    "suite_files",
]

SUITE_SUFFIXES = (".jsonl", ".yaml", ".yml")


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExactCheck(_Spec):
    """`expected` None means "candidate must equal baseline" (`exact: true`)."""

    expected: str | None = None
    strip: bool = True
    ignore_case: bool = False
    collapse_whitespace: bool = False
    strip_trailing_punctuation: bool = False


class JsonCheck(_Spec):
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    schema_file: str | None = None

    @model_validator(mode="after")
    def _one_schema(self) -> JsonCheck:
        if self.schema_ is not None and self.schema_file is not None:
            raise ValueError("give either schema or schema_file, not both")
        return self


class SqlCheck(_Spec):
    dialect: str = "sqlite"
    db: str | None = None
    """Path of a .sql fixture (schema + rows), relative to the suite file."""
    reference: str | None = None
    ordered: bool | None = None
    """Compare row order; default: only when the reference has ORDER BY."""


class UnitTestsCheck(_Spec):
    language: Literal["python"] = "python"
    tests: str
    entry_point: str | None = None
    setup: str = ""
    """Code run before the answer (imports the tests need)."""
    timeout_s: float = 10.0


class JudgeCheck(_Spec):
    mode: str = "pairwise"
    """A judge definition in judges/: pairwise, rubric, reference, or a user's own."""
    rubric: str | None = None
    reference: str | None = None


class YamlCheck(_Spec):
    format: Literal["yaml", "toml", "ini", "json"] = "yaml"
    required_keys: list[str] = Field(default_factory=list)
    """Dotted paths that must exist in the parsed document."""


class RegexCheck(_Spec):
    pattern: str
    mode: Literal["search", "fullmatch"] = "search"
    ignore_case: bool = False
    multiline: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        import re

        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return v


class ContainsCheck(_Spec):
    all: list[str] = Field(default_factory=list)
    any: list[str] = Field(default_factory=list)
    none: list[str] = Field(default_factory=list)
    ignore_case: bool = True


class Checks(_Spec):
    """What to verify on an answer; each key is one family of scorers."""

    exact: ExactCheck | None = None
    json_: JsonCheck | None = Field(default=None, alias="json")
    sql: SqlCheck | None = None
    unit_tests: UnitTestsCheck | None = None
    judge: JudgeCheck | None = None
    yaml_: YamlCheck | None = Field(default=None, alias="yaml")
    regex: RegexCheck | None = None
    contains: ContainsCheck | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        """Accept the short forms of Contract 1 (`exact: "Paris"`, `exact: true`, ...)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        ex = data.get("exact")
        if isinstance(ex, str):
            data["exact"] = {"expected": ex}
        elif ex is True:
            data["exact"] = {}
        elif ex is False or ex is None:
            data.pop("exact", None)
        for key in ("json", "yaml"):
            if data.get(key) is True:
                data[key] = {}
        if isinstance(data.get("regex"), str):
            data["regex"] = {"pattern": data["regex"]}
        c = data.get("contains")
        if isinstance(c, str):
            data["contains"] = {"all": [c]}
        elif isinstance(c, list):
            data["contains"] = {"all": c}
        if isinstance(data.get("judge"), str):
            data["judge"] = {"mode": data["judge"]}
        return data


class Case(BaseModel):
    """One business regression case. `route` (tag) defaults to the category."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    checks: Checks = Checks()
    tags: dict[str, str] = Field(default_factory=dict)
    source: str | None = None
    """Where the case came from (attribution of public data)."""
    # Filled by the loader, not by users:
    file: str | None = Field(default=None, exclude=True)
    line: int | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _one_input(self) -> Case:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("give exactly one of messages (chat) or prompt (completions)")
        return self

    @field_validator("messages")
    @classmethod
    def _messages(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must hold at least one message")
        for i, m in enumerate(v):
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"message {i} needs a role")
            if m["role"] not in ("system", "user", "assistant", "tool", "developer"):
                raise ValueError(f"message {i} has unknown role {m['role']!r}")
            if "content" not in m and "tool_calls" not in m:
                raise ValueError(f"message {i} needs content")
        return v

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_as_str(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: (str(x) if isinstance(x, (int, float, bool)) else x) for k, x in v.items()}
        return v

    @property
    def route(self) -> str:
        return self.tags.get("route", self.category)

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def content_hash(self) -> str:
        """Stable hash of what is sent and checked; resume refuses a changed suite."""
        body = self.model_dump(mode="json", by_alias=True, exclude={"file", "line"})
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]

    def check_names(self) -> list[str]:
        """The scorer names this case runs (json → json_parse + json_schema, ...)."""
        c = self.checks
        names: list[str] = []
        if c.exact is not None:
            names.append("exact")
        if c.json_ is not None:
            names.append("json_parse")
            if c.json_.schema_ is not None or c.json_.schema_file is not None:
                names.append("json_schema")
        if c.sql is not None:
            names.append("sql_parse")
            if c.sql.db and c.sql.reference:
                names.append("sql_result")
        if c.unit_tests is not None:
            names.append("unit_tests")
        if c.judge is not None:
            names.append("judge")
        if c.yaml_ is not None:
            names.append(f"{c.yaml_.format}_parse" if c.yaml_.format != "yaml" else "yaml_parse")
        if c.regex is not None:
            names.append("regex")
        if c.contains is not None:
            names.append("contains")
        return names


# ---------------------------------------------------------------- loading


def suite_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders into their suite files, in a stable order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.suffix in SUITE_SUFFIXES and f.is_file()))
        elif p.exists():
            out.append(p)
        else:
            raise SuiteError([Problem(str(p), None, "", "no such file or folder")])
    return out


def _loc(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for x in loc:
        if isinstance(x, int):
            parts.append(f"[{x}]")
        else:
            x = {"json_": "json", "yaml_": "yaml", "schema_": "schema"}.get(str(x), str(x))
            if x in ("function-after", "function-before") or x.startswith(("function-", "constrained-")):
                continue
            parts.append(("." if parts else "") + printable_key(x))
    return "".join(parts)


def yaml_problem(path: str, exc: yaml.YAMLError) -> Problem:
    """One problem line for a YAML error (PyYAML's own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark else None
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, control codes)
        what = f"character {exc.character!r} is not allowed" if isinstance(exc.character, str) else str(exc.reason)
        return Problem(path, None, "", f"bad YAML: {what} (at character {exc.position})")
    text = str(getattr(exc, "problem", None) or exc).strip()
    return Problem(path, line, "", f"bad YAML: {' '.join(text.split())}")


def printable_key(key: str) -> str:
    """A user's key as shown in a problem line: quoted when it holds line breaks or control characters."""
    return key if key.isprintable() else repr(key)


def _validation_problems(exc: ValidationError, path: str, line: int | None, lines_of: Any = None) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x in ("str", "bool", "dict[str,any]", "list[dict[str,any]]")))
        field = _loc(loc)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required field is missing"
        msg = msg.removeprefix("Value error, ")
        ln = lines_of(loc) if lines_of else line
        if not field and "messages" in msg:
            field = "messages"
        problems.append(Problem(path, ln or line, field, msg))
    # pydantic reports one error per union member; keep each (field, message) once
    seen: set[tuple[str, str]] = set()
    uniq = []
    for p in problems:
        if (p.field, p.message) not in seen:
            seen.add((p.field, p.message))
            uniq.append(p)
    return uniq


def _read_jsonl(path: Path, problems: list[Problem]) -> list[tuple[int, Any, Any]]:
    rows = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        problems.append(Problem(str(path), None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
        return rows
    except OSError as exc:
        problems.append(Problem(str(path), None, "", f"cannot read: {exc.strerror}"))
        return rows
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("//"):
            continue
        try:
            rows.append((n, json.loads(raw), None))
        except json.JSONDecodeError as exc:
            problems.append(Problem(str(path), n, "", f"bad JSON: {exc.msg} (column {exc.colno})"))
    return rows


def _yaml_line_finder(node: yaml.Node) -> Any:
    def find(loc: tuple[Any, ...]) -> int:
        cur = node
        line = cur.start_mark.line + 1
        for key in loc:
            key = {"json_": "json", "yaml_": "yaml", "schema_": "schema"}.get(key, key) if isinstance(key, str) else key
            nxt = None
            if isinstance(cur, yaml.MappingNode):
                for k, v in cur.value:
                    if k.value == key:
                        nxt = v
                        line = k.start_mark.line + 1
                        break
            elif isinstance(cur, yaml.SequenceNode) and isinstance(key, int) and key < len(cur.value):
                nxt = cur.value[key]
                line = nxt.start_mark.line + 1
            if nxt is None:
                break
            cur = nxt
        return line

    return find


def _read_yaml(path: Path, problems: list[Problem]) -> list[tuple[int, Any, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except UnicodeDecodeError as exc:
        problems.append(Problem(str(path), None, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
        return []
    except OSError as exc:
        problems.append(Problem(str(path), None, "", f"cannot read: {exc.strerror}"))
        return []
    except yaml.YAMLError as exc:
        problems.append(yaml_problem(str(path), exc))
        return []
    if data is None:
        return []
    if isinstance(data, dict) and "cases" in data:
        data = data["cases"]
        root = next((v for k, v in root.value if k.value == "cases"), root)
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        problems.append(Problem(str(path), 1, "", "expected a list of cases (or a mapping with key 'cases')"))
        return []
    return [(node.start_mark.line + 1, item, _yaml_line_finder(node)) for node, item in zip(root.value, data)]


def _check_files(case: Case, path: Path, line: int, problems: list[Problem]) -> Case:
    """Resolve schema files and SQL fixtures relative to the suite file."""
    base = path.parent
    updates: dict[str, Any] = {}
    js = case.checks.json_
    if js is not None and js.schema_file is not None:
        f = (base / js.schema_file)
        try:
            schema = json.loads(f.read_text(encoding="utf-8"))
            updates["json"] = JsonCheck.model_validate({"schema": schema})
        except OSError as exc:
            problems.append(Problem(str(path), line, "checks.json.schema_file", f"cannot read {f}: {exc.strerror}"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            problems.append(Problem(str(path), line, "checks.json.schema_file", f"{f} is not JSON: {exc}"))
    if js is not None and isinstance(js.schema_, dict):
        from jsonschema import SchemaError, validators

        try:
            validators.validator_for(js.schema_, default=validators.Draft202012Validator).check_schema(js.schema_)
        except SchemaError as exc:
            problems.append(Problem(str(path), line, "checks.json.schema", f"not a valid JSON Schema: {exc.message}"))
    sql = case.checks.sql
    if sql is not None:
        import sqlglot

        try:
            sqlglot.Dialect.get_or_raise(sql.dialect)
        except ValueError as exc:
            problems.append(Problem(str(path), line, "checks.sql.dialect", str(exc)))
        if sql.db is not None:
            f = base / sql.db
            if not f.is_file():
                problems.append(Problem(str(path), line, "checks.sql.db", f"fixture {f} does not exist"))
            else:
                updates["sql"] = sql.model_copy(update={"db": str(f.resolve())})
    if updates:
        data = case.checks.model_dump(by_alias=True, exclude_none=True)
        for k, v in updates.items():
            data[k] = v.model_dump(by_alias=True, exclude_none=True)
        case = case.model_copy(update={"checks": Checks.model_validate(data)})
    return case


def load_suite(paths: Iterable[str | Path]) -> list[Case]:
    """Load and validate every case; raise SuiteError listing all problems."""
    problems: list[Problem] = []
    cases: list[Case] = []
    first_seen: dict[str, tuple[str, int]] = {}
    files = suite_files(paths)
    if not files:
        raise SuiteError([Problem(",".join(map(str, paths)), None, "", "no suite files (.jsonl, .yaml) found")])
    for path in files:
        rows = _read_jsonl(path, problems) if path.suffix == ".jsonl" else _read_yaml(path, problems)
        for line, obj, lines_of in rows:
            if not isinstance(obj, dict):
                problems.append(Problem(str(path), line, "", f"expected a case object, got {type(obj).__name__}"))
                continue
            raw_id = obj.get("id")
            if isinstance(raw_id, str) and raw_id in first_seen:
                f0, l0 = first_seen[raw_id]
                problems.append(Problem(str(path), line, "id", f"duplicate id {raw_id!r} (first at {f0}:{l0})"))
            elif isinstance(raw_id, str):
                first_seen[raw_id] = (str(path), line)
            try:
                case = Case.model_validate(obj)
            except ValidationError as exc:
                problems.extend(_validation_problems(exc, str(path), line, lines_of))
                continue
            case = _check_files(case, path, line, problems)
            cases.append(case.model_copy(update={"file": str(path), "line": line}))
    if problems:
        problems.sort(key=lambda p: (p.path, p.line or 0))
        raise SuiteError(problems)
    return cases
