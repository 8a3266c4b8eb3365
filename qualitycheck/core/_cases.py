"""Cases and their checks, and loading suites with line-numbered problems.

A suite is a folder or file of `.jsonl` (one case per line) or `.yaml`/`.yml`
(a list of cases). Loading never stops at the first problem: it collects every
problem as `path:line: field: message` so a user fixes a suite in one pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from qualitycheck.core._checks import Checks, LoadContext, check_registry
from qualitycheck.core._errors import Problem, SuiteError

__all__ = [
    "Case",
    "Checks",
    "SuiteCases",
    "SuiteScan",
    "iter_suite",
    "load_suite",
    "scan_suite",
    "suite_files",
    "suite_fingerprint",
    "validate_case",
]

SUITE_SUFFIXES = (".jsonl", ".yaml", ".yml")


_FIRST_FORMAT_CHECKS = ("exact", "json", "sql", "unit_tests", "judge", "yaml", "regex", "contains")
"""The check keys every stored case of format version 1 carries, null when unused (see `Case.content_hash`)."""


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

    @field_validator("params")
    @classmethod
    def _params(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The request fields whose shape the tool depends on are checked here; the rest is sent as given."""
        tools = v.get("tools")
        names: list[str] = []
        if tools is not None:
            if not isinstance(tools, list):
                raise ValueError("tools must be a list of {type: function, function: {name, parameters}}")
            for i, t in enumerate(tools):
                fn = t.get("function") if isinstance(t, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                    raise ValueError(f"tools[{i}] needs function.name (a tool is {{type: function, function: {{name, parameters}}}})")
                if "parameters" in fn and not isinstance(fn["parameters"], (dict, bool)):
                    raise ValueError(f"tools[{i}].function.parameters must be a JSON Schema object")
                if fn["name"] in names:
                    raise ValueError(f"tools[{i}] repeats the tool name {fn['name']!r}")
                names.append(fn["name"])
        choice = v.get("tool_choice")
        if choice is not None:
            if isinstance(choice, dict):
                fn = choice.get("function")
                name = fn.get("name") if isinstance(fn, dict) else None
                if name not in names:
                    raise ValueError(f"tool_choice names {name!r}, which is not among the declared tools {names}")
            elif choice not in ("none", "auto", "required"):
                raise ValueError(
                    f'tool_choice must be "none", "auto", "required" or {{type: function, function: {{name}}}}, not {choice!r}'
                )
        fmt = v.get("response_format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema")):
            raise ValueError('response_format must be {type: "text" | "json_object" | "json_schema", ...}')
        stop = v.get("stop")
        if stop is not None and not (isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(x, str) for x in stop))):
            raise ValueError("stop must be a string or a list of strings")
        seed = v.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError("seed must be an integer")
        temperature = v.get("temperature")
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0):
            raise ValueError(f"temperature must be a number ≥ 0, got {temperature!r}")
        top_k = v.get("top_k")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
            raise ValueError(f"top_k must be an integer, got {top_k!r}")
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

    @property
    def sampled(self) -> bool:
        """The request samples: temperature above 0 (requests default to 0), unless `top_k: 1` makes it greedy.

        A sampled case answers differently every time it is asked, so it is
        compared by how often each side passes its checks over several
        samples, never by one pair of texts (`verdict._sequential`).
        """
        t = self.params.get("temperature") or 0
        return t > 0 and self.params.get("top_k") != 1

    def content_hash(self) -> str:
        """Stable hash of what is sent and checked; resume refuses a changed suite.

        Run folders store it, so it must not move when the code does: the
        check families of the first case format are hashed as null when a
        case does not use them, as that format dumped them.
        """
        body = self.model_dump(mode="json", by_alias=True, exclude={"file", "line"})
        body["checks"] = dict.fromkeys(_FIRST_FORMAT_CHECKS) | body["checks"]
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]

    def check_names(self) -> list[str]:
        """The check names this case's scores carry (json → json_parse + json_schema, ...), as its families declare them."""
        return self.checks.names()

    def tokenize_body(self, model: str, extra_body: dict[str, Any]) -> dict[str, Any]:
        """A vLLM `/tokenize` request for this case's input: the prompt exactly as a chat or completions request renders it.

        The messages go with what else the chat template reads (`tools`,
        `chat_template_kwargs`: the case's own, else the target's
        `extra_body`), so the server applies the same template a request
        does, generation prompt included. The preflight compares both
        servers' answers; the likelihood stage scores answers after it.
        """
        body: dict[str, Any] = {"model": model}
        if self.is_chat:
            body["messages"] = self.messages
            for key in ("tools", "chat_template_kwargs"):
                value = self.params.get(key, extra_body.get(key))
                if value is not None:
                    body[key] = value
        else:
            body["prompt"] = self.prompt
        return body


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


def _read_jsonl(path: Path, problems: list[Problem]) -> Iterator[tuple[int, Any, Any]]:
    """Rows one line at a time, so a 100,000-case file is never held as text or as a list of rows.

    A file that is not UTF-8 yields no rows at all (as when it was decoded
    whole), so it is checked in a first cheap pass before any row is parsed.
    Lines are numbered as `str.splitlines` numbers them (it also breaks at
    \\r, \\x0b, \\x85, \\u2028, ...): each `\\n`-ended chunk is split the same way.
    """
    offset = 0
    try:
        with path.open("rb") as f:
            for raw in f:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:  # the byte offset in the whole file, as a whole-file decode gives it
                    problems.append(Problem(str(path), None, "", f"not UTF-8 text ({exc.reason} at byte {offset + exc.start})"))
                    return
                offset += len(raw)
        f = path.open("rb")
    except OSError as exc:
        problems.append(Problem(str(path), None, "", f"cannot read: {exc.strerror}"))
        return
    n = 0
    with f:
        for raw in f:
            for text in raw.decode("utf-8").splitlines():
                n += 1
                if not text.strip() or text.lstrip().startswith("//"):
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:
                    problems.append(Problem(str(path), n, "", f"bad JSON: {exc.msg} (column {exc.colno})"))
                    continue
                yield n, obj, None


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
        if isinstance(root, yaml.MappingNode):
            root = next((v for k, v in root.value if k.value == "cases"), root)
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        problems.append(Problem(str(path), 1, "", "expected a list of cases (or a mapping with key 'cases')"))
        return []
    return [(node.start_mark.line + 1, item, _yaml_line_finder(node)) for node, item in zip(root.value, data)]


def _check_files(case: Case, path: Path, line: int, problems: list[Problem]) -> Case:
    """Each family's load-time check: files relative to the suite file (schemas, SQL fixtures, user modules)."""
    updates: dict[str, Any] = {}
    for key, spec in case.checks.items():
        fam = check_registry[key]
        if fam.load is None:
            continue
        ctx = LoadContext(path.parent)
        new = fam.load(spec, ctx)
        for fld, msg in ctx.problems:
            problems.append(Problem(str(path), line, f"checks.{key}" + (fld if fld.startswith("[") or not fld else f".{fld}"), msg))
        if new is not spec:
            updates[key] = new
    if updates:
        case = case.model_copy(update={"checks": case.checks.replace(**updates)})
    return case


def load_suite(paths: Iterable[str | Path]) -> list[Case]:
    """Load and validate every case; raise SuiteError listing all problems.

    Holds the whole suite: `run` validates with `scan_suite` and reads cases
    with `iter_suite` instead, so its memory does not grow with the suite.
    """
    problems: list[Problem] = []
    cases = list(_validated(paths, problems, _SeenIds()))
    _raise_if(problems)
    return cases


def iter_suite(paths: Iterable[str | Path], *, check_ids: bool = True) -> Iterator[Case]:
    """Every valid case, one at a time in suite order; SuiteError after the last one if any was not.

    For a suite already accepted by `scan_suite`: a consumer acts on each case
    as it comes, before the end of the suite is known to be valid. Such a
    re-read may skip duplicate detection (`check_ids=False`), which is the
    only part of validation whose memory grows with the suite.
    """
    problems: list[Problem] = []
    yield from _validated(paths, problems, _SeenIds() if check_ids else None)
    _raise_if(problems)


class SuiteCases:
    """A suite read again from its files on every iteration: re-iterable, never held.

    What `run` hands to the stages that walk the cases (judge validation,
    the store, the preflight, each generation pass) once `scan_suite` has
    accepted the suite. `keep` selects a shard. `count`, when the scan gave
    it, spares a pass to answer `len` (the runner sizes a fresh run with it).
    """

    def __init__(self, paths: Iterable[str | Path], keep: Callable[[Case], bool] | None = None, *, count: int | None = None):
        self.paths = list(paths)
        self.keep = keep
        self._count = count

    def __len__(self) -> int:
        if self._count is None:
            self._count = sum(1 for _ in self)
        return self._count

    def __iter__(self) -> Iterator[Case]:
        for case in iter_suite(self.paths, check_ids=False):
            if self.keep is None or self.keep(case):
                yield case


@dataclass(frozen=True)
class SuiteScan:
    """What `run` needs to know about a suite before generating, without holding its cases."""

    count: int
    """Cases kept (the shard's, when one was selected)."""
    fingerprint: str
    """`suite_fingerprint` of the kept cases: the manifest's resume check."""
    judged: bool
    """Some kept case has a judge check (only then are the judge definitions checked against cases)."""


def scan_suite(paths: Iterable[str | Path], keep: Callable[[Case], bool] | None = None) -> SuiteScan:
    """Validate a suite in one streaming pass, with exactly `load_suite`'s problems.

    What stays in memory is one packed entry per case id (duplicate
    detection with the first file:line, and the content hash of the kept
    cases): about 230 bytes a case, where `load_suite` holds about 2 KB
    (tracemalloc, a one-message case). JSONL is read a line at a time; a
    YAML file is still parsed whole, one file at a time.
    """
    problems: list[Problem] = []
    seen = _SeenIds()
    count = 0
    judged = False
    for case in _validated(paths, problems, seen):
        if keep is None or keep(case):
            seen.set_hash(case.id, case.content_hash())
            count += 1
            judged = judged or "judge" in case.checks
    _raise_if(problems)
    return SuiteScan(count, seen.fingerprint(), judged)


def suite_fingerprint(pairs: Iterable[tuple[str, str]]) -> str:
    """One hash over (case id, content hash) pairs, independent of suite order."""
    h = hashlib.sha256()
    for cid, content in sorted(pairs):
        h.update(f"{cid}\0{content}\n".encode())
    return h.hexdigest()[:16]


class _SeenIds:
    """Every case id read, where it first appeared and, once kept, its content hash.

    One int per id packs the file number, the line and the 64-bit content
    hash (+1, so 0 means "not kept"): a 100,000-case suite costs ~23 MB here
    where holding its cases costs ~200 MB.
    """

    def __init__(self) -> None:
        self.files: list[str] = []
        self._ids: dict[str, int] = {}

    def file(self, path: Path) -> int:
        self.files.append(str(path))
        return len(self.files) - 1

    def first(self, cid: str) -> tuple[str, int] | None:
        v = self._ids.get(cid)
        return None if v is None else (self.files[(v >> 32) & 0xFFFFFFFF], v & 0xFFFFFFFF)

    def add(self, cid: str, file_no: int, line: int) -> None:
        self._ids[cid] = file_no << 32 | line

    def set_hash(self, cid: str, content_hash: str) -> None:
        self._ids[cid] = (self._ids.get(cid, 0) & 0xFFFFFFFFFFFFFFFF) | (int(content_hash, 16) + 1) << 64

    def fingerprint(self) -> str:
        return suite_fingerprint((cid, f"{(v >> 64) - 1:016x}") for cid, v in self._ids.items() if v >> 64)


def _validated(paths: Iterable[str | Path], problems: list[Problem], seen: _SeenIds | None) -> Iterator[Case]:
    """The valid cases in suite order; every problem found is appended to `problems` as it is met.

    `seen` None skips duplicate detection (a re-read of an accepted suite).
    """
    paths = list(paths)
    files = suite_files(paths)
    if not files:
        raise SuiteError([Problem(",".join(map(str, paths)), None, "", "no suite files (.jsonl, .yaml) found")])
    for path in files:
        where, file_no = str(path), seen.file(path) if seen is not None else 0
        rows = _read_jsonl(path, problems) if path.suffix == ".jsonl" else _read_yaml(path, problems)
        for line, obj, lines_of in rows:
            if not isinstance(obj, dict):
                problems.append(Problem(where, line, "", f"expected a case object, got {type(obj).__name__}"))
                continue
            raw_id = obj.get("id")
            if isinstance(raw_id, str) and seen is not None:
                first = seen.first(raw_id)
                if first is not None:
                    problems.append(Problem(where, line, "id", f"duplicate id {raw_id!r} (first at {first[0]}:{first[1]})"))
                else:
                    seen.add(raw_id, file_no, line)
            case = validate_case(obj, path, line, problems, lines_of)
            if case is not None:
                yield case


def validate_case(obj: dict[str, Any], path: Path, line: int, problems: list[Problem], lines_of: Any = None) -> Case | None:
    """One case object as `validate` reads it from `path:line`; its problems are appended (None: not a case at all).

    What every reader of cases shares: the model's problems by field, then
    each family's load-time check against the suite file's folder. An
    importer hands a case it made here before writing it, so what it
    writes is what `qualitycheck validate` accepts.
    """
    where = str(path)
    try:
        case = Case.model_validate(obj)
    except ValidationError as exc:
        problems.extend(_validation_problems(exc, where, line, lines_of))
        return None
    case = _check_files(case, path, line, problems)  # its problems are appended; the case is still read, as before
    return case.model_copy(update={"file": where, "line": line})


def _raise_if(problems: list[Problem]) -> None:
    if problems:
        problems.sort(key=lambda p: (p.path, p.line or 0))
        raise SuiteError(problems)
