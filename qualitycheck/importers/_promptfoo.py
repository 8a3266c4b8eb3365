"""promptfoo test files → cases: `vars` rendered into the prompt template, `assert` types mapped to checks.

What promptfoo does, read from its source (promptfoo 0.121, `src/assertions/*.ts`,
`src/csv.ts`, `src/util/testCaseReader.ts`, `src/prompts/processors/*.ts`,
`renderPrompt` in `src/evaluatorHelpers.ts`), and done the same here:

- A config (`prompts`, `tests`, `defaultTest`) or a tests file (YAML or JSON
  list, JSONL, CSV with `__expected` columns) with `--prompt`. `tests` may
  name files (`file://tests.csv`, globs); `defaultTest`'s vars, asserts and
  metadata go into every test. Several prompts make one case per prompt
  and test (a `.txt` prompt file holds several, separated by `---` lines).
- Templates: `{{ name }}` is the var's value (a number as JavaScript
  prints it, a trailing newline of a string dropped; an undefined var
  renders empty, as nunjucks does). A prompt that is JSON has its vars
  rendered inside its strings. Any other nunjucks construct (filters,
  `{% %}` tags, expressions) is refused by name: it is not rendered here.
- The request: a rendered prompt that is a JSON list of chat messages (or
  YAML starting `- role:`) is sent as those messages; any other text as one
  user message, as promptfoo's chat providers send it.
- Asserts: `equals` → `exact` with nothing stripped; `contains`,
  `contains-all`, `contains-any` → `contains` case-sensitive (qualitycheck's
  default ignores case); `icontains*` → `contains` ignoring case;
  `not-contains`, `not-icontains` → its `none` list; `regex` → `regex`
  (the JavaScript pattern translated: `$` is the end of the answer, `\\d`,
  `\\w`, `\\b` are ASCII and `\\s` is JavaScript's whitespace);
  `is-json` → `json` with `strict: true` (the whole answer parses), and
  `contains-json` → `json` (JSON found anywhere), each with its schema
  (ajv's default draft, 7, unless it names one). `javascript` and `python`
  run code and are refused by name, as is every other type, `transform`,
  `weight: 0`, a test `threshold` and a second assert that would need a
  second check of one family.
- `providers` are not imported: each case goes to `--baseline` and
  `--candidate`.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from qualitycheck.core._cases import _yaml_line_finder, yaml_problem
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.importers._common import Drafted, ImportOptions, Item, Note, Unmapped, stem_of

__all__ = ["ASSERTION_TYPES", "js_regex", "read_promptfoo"]

ASSERTION_TYPES = tuple(
    [
        "agent-rubric",
        "answer-relevance",
        "bleu",
        "classifier",
        "contains",
        "contains-all",
        "contains-any",
        "contains-html",
        "contains-json",
        "contains-sql",
        "contains-xml",
        "context-faithfulness",
        "context-recall",
        "context-relevance",
        "conversation-relevance",
        "cost",
        "equals",
        "factuality",
        "finish-reason",
        "g-eval",
        "gleu",
        "guardrails",
        "icontains",
        "icontains-all",
        "icontains-any",
        "is-html",
        "is-json",
        "is-refusal",
        "is-sql",
        "is-valid-function-call",
        "is-valid-openai-function-call",
        "is-valid-openai-tools-call",
        "is-xml",
        "javascript",
        "latency",
        "levenshtein",
        "llm-rubric",
        "pi",
        "meteor",
        "model-graded-closedqa",
        "model-graded-factuality",
        "moderation",
        "perplexity",
        "perplexity-score",
        "python",
        "regex",
        "rouge-n",
        "ruby",
        "similar",
        "similar:cosine",
        "similar:dot",
        "similar:euclidean",
        "starts-with",
        "tool-call-f1",
        "skill-used",
        "trajectory:goal-success",
        "trajectory:tool-args-match",
        "trajectory:step-count",
        "trajectory:tool-sequence",
        "trajectory:tool-used",
        "trace-error-spans",
        "trace-span-count",
        "trace-span-duration",
        "search-rubric",
        "webhook",
        "word-count",
    ]
)
"""promptfoo's base assertion types (`BaseAssertionTypesSchema`, promptfoo 0.121): a CSV `__expected` cell
`type:value` names one of them, else the whole cell is an `equals` value."""

_CSV_ASSERTION = re.compile(r"^(not-)?(" + "|".join(map(re.escape, ASSERTION_TYPES)) + r")(?:\((\d+(?:\.\d+)?)\))?(?::([\s\S]*))?$")
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_TEMPLATE_SYNTAX = re.compile(r"\{\{|\{%|\{#")
_CODE_TYPES = {"javascript": "JavaScript", "python": "Python"}
_SCRIPT_SUFFIXES = (".js", ".cjs", ".mjs", ".ts", ".cts", ".mts", ".py", ".rb")
_TEST_KEYS = {"description", "vars", "assert", "metadata", "options"}
_HARMLESS_OPTIONS = {"runSerially", "disableVarExpansion", "disableConversationVar"}
"""Test options that change how promptfoo schedules a test, not what is sent or checked."""
_ASSERT_KEYS = {"type", "value", "metric", "weight", "threshold"}
_DRAFT_07 = "http://json-schema.org/draft-07/schema#"
_JS_WHITESPACE = r"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
"""What `\\s` matches in a JavaScript pattern."""


class _Refused(Exception):
    """A construct with no faithful mapping; `field` is where it is, relative to the test."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# ------------------------------------------------------------------ reading files with positions


@dataclass
class _Doc:
    """A parsed YAML/JSON file and the line of any path in it."""

    path: Path
    data: Any
    node: Any

    def line(self, *loc: Any) -> int | None:
        if self.node is None:
            return None
        return int(_yaml_line_finder(self.node)(loc))


def _load_doc(path: Path, problems: list[Problem]) -> _Doc | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(str(path), None, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}"))
        return None
    try:
        return _Doc(path, yaml.safe_load(text), yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        if path.suffix == ".json":  # JSON that PyYAML's YAML 1.1 reads differently: parsed as JSON, without lines
            try:
                return _Doc(path, json.loads(text), None)
            except json.JSONDecodeError:
                pass
        problems.append(yaml_problem(str(path), exc))
        return None


def _jsonl_tests(path: Path, problems: list[Problem]) -> Iterator[tuple[Any, int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(str(path), None, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}"))
        return
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line), n
        except json.JSONDecodeError as exc:
            problems.append(Problem(str(path), n, "", f"bad JSON: {exc.msg} (column {exc.colno})"))


# ------------------------------------------------------------------ tests


_Assert = tuple[Any, str, int | None, Path]
"""An assert, its field (`tests[2].assert[0]`, or a CSV column), its line and its file."""


@dataclass
class _Test:
    """One promptfoo test, whatever file it came from, with where each part of it is."""

    path: Path
    line: int | None
    at: str
    """Its place in the file (`tests[2]`, or "" for a line of a JSONL or CSV file)."""
    raw: dict[str, Any]
    asserts: list[_Assert] = field(default_factory=list)
    """Each assert with where it is."""
    problems: list[Problem] = field(default_factory=list)


def _csv_tests(path: Path, problems: list[Problem]) -> Iterator[_Test]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(str(path), None, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}"))
        return
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        problems.append(Problem(str(path), 1, "", f"bad CSV: {exc}"))
        return
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            problems.append(Problem(str(path), reader.line_num, "", f"bad CSV: {exc}"))
            return
        line, start = start, reader.line_num + 1
        if not row:
            continue
        if len(row) != len(header):
            problems.append(Problem(str(path), line, "", f"{len(row)} cells where the header has {len(header)} columns"))
            continue
        yield _test_of_row(path, line, dict(zip(header, row)))


def _test_of_row(path: Path, line: int, row: dict[str, str]) -> _Test:
    """A CSV row as promptfoo's `testCaseFromCsvRow` reads it: `__` columns are settings, the others vars."""
    raw: dict[str, Any] = {"vars": {}}
    test = _Test(path, line, "", raw)
    for key, value in row.items():
        if key.startswith("__expected"):
            if value.strip():
                test.asserts.append((_assertion_from_string(value), key, line, path))
        elif key == "__description":
            raw["description"] = value
        elif key in ("__prefix", "__suffix", "__providerOutput", "__threshold") and value:
            raw[key] = value  # refused when the test is mapped, by column name
        elif key in ("__metric", "__prefix", "__suffix", "__providerOutput", "__threshold"):
            continue
        else:
            raw["vars"][key] = value
    return test


def _assertion_from_string(expected: str) -> dict[str, Any]:
    """promptfoo's `assertionFromString`: a CSV `__expected` cell → an assert."""
    for prefix in ("javascript:", "fn:", "eval:"):
        if expected.startswith(prefix):
            return {"type": "javascript", "value": expected[len(prefix) :].strip()}
    if expected.startswith(("grade:", "llm-rubric:")):
        return {"type": "llm-rubric", "value": expected.split(":", 1)[1]}
    if expected.startswith("python:") or (expected.startswith("file://") and (expected.endswith(".py") or ".py:" in expected)):
        return {"type": "python", "value": expected.split(":", 1)[1].strip()}
    if expected.startswith("file://") and any(expected.endswith(s) or f"{s}:" in expected for s in (".js", ".ts")):
        return {"type": "javascript", "value": expected[len("file://") :].strip()}
    m = _CSV_ASSERTION.match(expected)
    if m is None:
        return {"type": "equals", "value": expected}
    negated, kind, _threshold, value = m.groups()
    out: dict[str, Any] = {"type": (negated or "") + kind}
    if kind in ("contains-all", "contains-any", "icontains-all", "icontains-any"):
        out["value"] = [s.strip() for s in (value or "").split(",")]
    elif value is not None:
        out["value"] = value
    return out


def _tests_of(entry: Any, base: Path, doc: _Doc, loc: tuple[Any, ...], problems: list[Problem]) -> Iterator[_Test]:
    """The tests one `tests` entry holds: an inline test, or the files a path or glob names."""
    if isinstance(entry, dict):
        if "path" in entry:
            problems.append(
                Problem(str(doc.path), doc.line(*loc), _field(loc), "a tests entry with `path` and `config` (a script's tests) is not read")
            )
            return
        test = _Test(doc.path, doc.line(*loc), _field(loc), entry)
        test.asserts = _asserts_of(entry, doc, loc, test.problems)
        yield test
        return
    if not isinstance(entry, str):
        problems.append(Problem(str(doc.path), doc.line(*loc), _field(loc), f"expected a test or a file path, got {type(entry).__name__}"))
        return
    ref = entry.removeprefix("file://")
    if ref.startswith(("https://", "http://", "huggingface://", "langfuse://", "az://")) or ref.split(":")[0].endswith(_SCRIPT_SUFFIXES):
        problems.append(
            Problem(
                str(doc.path),
                doc.line(*loc),
                _field(loc),
                f"tests from {entry!r} are not read: only local CSV, YAML, JSON and JSONL files are",
            )
        )
        return
    files = sorted(glob.glob(str(base / ref))) if glob.has_magic(ref) else [str(base / ref)]
    if not files:
        problems.append(Problem(str(doc.path), doc.line(*loc), _field(loc), f"no file matches {entry!r}"))
    for f in files:
        yield from _tests_file(Path(f), problems)


def _tests_file(path: Path, problems: list[Problem]) -> Iterator[_Test]:
    if not path.is_file():
        problems.append(Problem(str(path), None, "", "no such file"))
        return
    if path.suffix == ".csv":
        yield from _csv_tests(path, problems)
        return
    if path.suffix == ".jsonl":
        for raw, line in _jsonl_tests(path, problems):
            if not isinstance(raw, dict):
                problems.append(Problem(str(path), line, "", f"expected a test object, got {type(raw).__name__}"))
                continue
            test = _Test(path, line, "", raw)
            test.asserts = (
                [(a, f"assert[{j}]", line, path) for j, a in enumerate(raw["assert"])] if isinstance(raw.get("assert"), list) else []
            )
            if "assert" in raw and not isinstance(raw["assert"], list):
                test.problems.append(Problem(str(path), line, "assert", "expected a list of asserts"))
            yield test
        return
    if path.suffix not in (".yaml", ".yml", ".json"):
        problems.append(Problem(str(path), None, "", "not a tests file promptfoo reads here (.csv, .yaml, .yml, .json, .jsonl)"))
        return
    doc = _load_doc(path, problems)
    if doc is None or doc.data is None:
        return
    items = doc.data if isinstance(doc.data, list) else [doc.data]
    for i, raw in enumerate(items):
        loc: tuple[Any, ...] = (i,) if isinstance(doc.data, list) else ()
        if not isinstance(raw, dict):
            problems.append(Problem(str(path), doc.line(*loc), _field(loc), f"expected a test object, got {type(raw).__name__}"))
            continue
        test = _Test(path, doc.line(*loc), _field(loc), raw)
        test.asserts = _asserts_of(raw, doc, loc, test.problems)
        yield test


def _asserts_of(raw: dict[str, Any], doc: _Doc, loc: tuple[Any, ...], problems: list[Problem]) -> list[_Assert]:
    asserts = raw.get("assert")
    if asserts is None:
        return []
    if not isinstance(asserts, list):
        problems.append(Problem(str(doc.path), doc.line(*loc, "assert"), _field((*loc, "assert")), "expected a list of asserts"))
        return []
    return [(a, _field((*loc, "assert", j)), doc.line(*loc, "assert", j), doc.path) for j, a in enumerate(asserts)]


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for x in loc:
        out += f"[{x}]" if isinstance(x, int) else (f".{x}" if out else str(x))
    return out


# ------------------------------------------------------------------ prompts


@dataclass(frozen=True)
class _Prompt:
    raw: str
    where: str
    """`prompts[0]`, `prompts.txt` (first of 2), or `--prompt`: named in problems."""
    path: str
    """The file the template is in (the config, a prompt file), or `--prompt`."""
    line: int | None = None
    """Where the template starts in that file."""

    @property
    def label(self) -> str:
        """How a problem of one test with this prompt names it."""
        return "--prompt" if self.path == "--prompt" else f"the prompt at {self.path}" + (f":{self.line}" if self.line else "")


def _prompts_of(value: Any, base: Path, doc: _Doc | None, where: str) -> Iterator[_Prompt | Problem | Unmapped]:
    """The prompts of a config's `prompts` (`doc` the config) or of `--prompt` (`doc` None)."""
    doc_path = str(doc.path) if doc is not None else where
    entries = value if isinstance(value, list) else [value]
    if isinstance(value, dict):  # the legacy {path: label} form
        entries = list(value)
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]" if isinstance(value, list) else where
        line = doc.line(where, i) if doc is not None and isinstance(value, list) else None
        if isinstance(entry, dict):
            if entry.get("config"):
                yield Unmapped(
                    Problem(doc_path, line, f"{at}.config", "a prompt's own provider config is not imported (set params in the suite)")
                )
                continue
            if entry.get("function") or ("raw" not in entry and "id" not in entry):
                yield Unmapped(Problem(doc_path, line, at, "a prompt without `raw` text (a function) is not imported"))
                continue
            entry = entry.get("raw", entry.get("id"))
        if not isinstance(entry, str):
            yield Problem(doc_path, line, at, f"expected a prompt (text or file://PATH), got {type(entry).__name__}")
            continue
        if not entry.startswith("file://"):
            yield _Prompt(entry, at, doc_path, line)
            continue
        yield from _prompt_files(entry, base, doc_path, at, line)


def _prompt_files(entry: str, base: Path, doc_path: str, at: str, line: int | None) -> Iterator[_Prompt | Problem | Unmapped]:
    ref = entry.removeprefix("file://")
    if ref.split(":")[0].endswith(_SCRIPT_SUFFIXES):
        yield Unmapped(
            Problem(doc_path, line, at, f"the prompt {entry!r} is a function: its text is made by code, which qualitycheck does not run")
        )
        return
    files = sorted(glob.glob(str(base / ref))) if glob.has_magic(ref) else [str(base / ref)]
    if not files or not Path(files[0]).is_file():
        yield Problem(doc_path, line, at, f"no prompt file matches {entry!r}")
        return
    for name in files:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            yield Problem(str(path), None, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}")
            continue
        if path.suffix == ".jsonl":
            for n, raw in enumerate(text.split("\n"), 1):
                if raw:
                    yield _Prompt(raw, f"line {n}", str(path), n)
        elif path.suffix in (".yaml", ".yml"):
            try:
                yield _Prompt(json.dumps(yaml.safe_load(text), ensure_ascii=False, separators=(",", ":")), "prompt", str(path), 1)
            except yaml.YAMLError:
                yield _Prompt(text, "prompt", str(path), 1)
        elif path.suffix in (".json", ".md"):
            yield _Prompt(text, "prompt", str(path), 1)
        else:  # .txt and the rest: prompts separated by `---` lines
            parts = _split_prompts(text)
            for k, (start, part) in enumerate(parts):
                yield _Prompt(part, f"prompt {k + 1} of {len(parts)}" if len(parts) > 1 else "prompt", str(path), start)


def _split_prompts(text: str) -> list[tuple[int, str]]:
    """promptfoo's `processTxtFile`: prompts separated by `---` lines, each stripped, with the line it starts on."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 1
    for n, line in enumerate(re.split(r"\r?\n", text), 1):
        if line.strip() == "---":
            out.append((start, "\n".join(buf).strip()))
            buf, start = [], n + 1
        else:
            buf.append(line)
    out.append((start, "\n".join(buf).strip()))
    return [(n, p) for n, p in out if p]


# ------------------------------------------------------------------ rendering


def js_string(value: Any) -> str | None:
    """A scalar as JavaScript's `String()` prints it (None for values that are not scalars)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        text = repr(value)
        if "e" in text:  # 1e-07 → 1e-7, 1e+22 stays
            mant, exp = text.split("e")
            sign = "-" if exp.startswith("-") else "+"
            text = f"{mant}e{sign}{int(exp.lstrip('+-'))}"
        return text
    if isinstance(value, str):
        return value
    return None


def _vars_of(raw_vars: Any) -> dict[str, str]:
    """A test's vars as strings, as promptfoo renders them; lists, objects and files are refused by name."""
    if raw_vars is None:
        return {}
    if not isinstance(raw_vars, dict):
        raise _Refused("vars", "a vars file or list is not imported: give the vars inline")
    out: dict[str, str] = {}
    for name, value in raw_vars.items():
        if isinstance(value, list):
            raise _Refused(f"vars.{name}", "a list: promptfoo makes one test per value; expand it into tests first")
        if isinstance(value, str) and value.startswith(("file://", "package:")):
            raise _Refused(f"vars.{name}", f"loads {value!r}: vars from files or code are not imported")
        text = js_string(value)
        if text is None:
            raise _Refused(f"vars.{name}", f"a {type(value).__name__}: only text and numbers are rendered here")
        if _TEMPLATE_SYNTAX.search(text):
            raise _Refused(f"vars.{name}", "holds a template itself (vars that render other vars are not imported)")
        out[str(name)] = text.removesuffix("\n") if isinstance(value, str) else text
    return out


def _render(template: str, variables: dict[str, str], where: str) -> str:
    """`{{ name }}` placeholders only; any other nunjucks construct is refused by name."""
    rest = _PLACEHOLDER.sub("", template)
    m = _TEMPLATE_SYNTAX.search(rest)
    if m is not None:
        snippet = rest[m.start() : m.start() + 40].split("\n")[0]
        raise _Refused(where, f"uses nunjucks beyond {{{{ var }}}} ({snippet!r}): filters, tags and expressions are not rendered here")
    return _PLACEHOLDER.sub(lambda mm: variables.get(mm.group(1), ""), template)


def _render_value(value: Any, variables: dict[str, str], where: str) -> Any:
    if isinstance(value, str):
        return _render(value, variables, where)
    if isinstance(value, list):
        return [_render_value(v, variables, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _render_value(v, variables, f"{where}.{k}") for k, v in value.items()}
    return value


def _request(prompt: _Prompt, variables: dict[str, str]) -> list[dict[str, Any]]:
    """The chat messages promptfoo's chat providers send for this prompt and these vars."""
    try:
        parsed = json.loads(prompt.raw)
    except json.JSONDecodeError:
        parsed = None
    else:
        if isinstance(parsed, (list, dict)):  # a JSON prompt: vars rendered inside its strings
            parsed = _render_value(parsed, variables, prompt.label)
            return _messages(parsed, prompt)
    text = _render(prompt.raw, variables, prompt.label)
    stripped = text.strip()
    if stripped.startswith("- role:"):
        try:
            return _messages(yaml.safe_load(text), prompt)
        except yaml.YAMLError as exc:
            raise _Refused(prompt.label, f"renders as chat messages in YAML that do not parse ({exc})") from None
    try:
        as_json = json.loads(text)
    except json.JSONDecodeError:
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            raise _Refused(prompt.label, "renders as text that looks like JSON but does not parse (promptfoo refuses it too)") from None
        return [{"role": "user", "content": text}]
    return _messages(as_json, prompt)


def _check_template(prompt: _Prompt) -> None:
    """Refuse a prompt whose template uses more than `{{ name }}`, whatever the vars."""
    try:
        parsed = json.loads(prompt.raw)
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, (list, dict)):
        _render_value(parsed, {}, prompt.label)
    else:
        _render(prompt.raw, {}, prompt.label)


def _messages(value: Any, prompt: _Prompt) -> list[dict[str, Any]]:
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return value
    raise _Refused(prompt.label, "renders as JSON that is not a list of chat messages ({role, content})")


# ------------------------------------------------------------------ asserts


@dataclass
class _Checks:
    """The checks one test's asserts map to, built one assert at a time."""

    exact: dict[str, Any] | None = None
    contains: dict[str, Any] = field(default_factory=lambda: {"all": [], "any": [], "none": []})
    contains_mode: bool | None = None
    """ignore_case of the contains check, once an assert set it."""
    regex: str | None = None
    json: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.exact is not None:
            out["exact"] = self.exact
        lists = {k: v for k, v in self.contains.items() if v}
        if lists:
            out["contains"] = {**lists, "ignore_case": bool(self.contains_mode)}
        if self.regex is not None:
            out["regex"] = self.regex
        if self.json is not None:
            out["json"] = self.json
        return out


def _map_assert(checks: _Checks, a: Any, where: str, variables: dict[str, str], base: Path) -> None:
    if not isinstance(a, dict) or not isinstance(a.get("type"), str):
        raise _Refused(where, "expected an assert {type, value}")
    kind: str = a["type"]
    base_kind = kind.removeprefix("not-")
    if base_kind in _CODE_TYPES:
        raise _Refused(
            f"{where}.type",
            f"{kind!r} runs {_CODE_TYPES[base_kind]} code, which qualitycheck does not run (port it to a `python` check by hand)",
        )
    extra = sorted(set(a) - _ASSERT_KEYS)
    if extra:
        raise _Refused(
            f"{where}.{extra[0]}", f"{extra[0]!r} on an assert is not imported (it changes what the assert sees or who grades it)"
        )
    if a.get("weight") == 0:
        raise _Refused(f"{where}.weight", "weight 0 (an assert that does not count) is not imported")
    value = _render_value(a.get("value"), variables, f"{where}.value")
    mapper = _MAPPERS.get(kind)
    if mapper is None:
        raise _Refused(f"{where}.type", f"assert type {kind!r} has no qualitycheck check")
    mapper(checks, value, where, base)


def _text_value(value: Any, where: str) -> str:
    text = js_string(value) if not isinstance(value, bool) else None
    if text is None or text == "":
        raise _Refused(f"{where}.value", "expected a non-empty string or a number")
    return text


def _list_value(value: Any, where: str) -> list[str]:
    if isinstance(value, str):  # promptfoo's parseCommaSeparatedValues
        value = [s.strip() for s in next(csv.reader([value], skipinitialspace=True), [])]
    if not isinstance(value, list) or not value:
        raise _Refused(f"{where}.value", "expected a list of strings")
    return [_text_value(v, f"{where}.value") for v in value]


def _contains(key: str, ignore_case: bool, many: bool) -> Any:
    def mapper(checks: _Checks, value: Any, where: str, base: Path) -> None:
        if checks.contains_mode is not None and checks.contains_mode != ignore_case:
            raise _Refused(
                f"{where}.type",
                "mixes case-sensitive and case-insensitive contains asserts: one case holds one contains check, of one mode",
            )
        if key == "any" and checks.contains["any"]:
            raise _Refused(f"{where}.type", "a second contains-any: one case holds one any-list")
        values = _list_value(value, where) if many else [_text_value(value, where)]
        checks.contains_mode = ignore_case
        checks.contains[key] += values

    return mapper


def _equals(checks: _Checks, value: Any, where: str, base: Path) -> None:
    if isinstance(value, (dict, list)) or (isinstance(value, str) and value.startswith("file://")):
        raise _Refused(f"{where}.value", "equals against JSON (deep equality of the parsed answer) is not imported")
    if checks.exact is not None:
        raise _Refused(f"{where}.type", "a second equals: one case holds one exact check")
    text = js_string(value)
    if text is None:
        raise _Refused(f"{where}.value", "expected a string or a number")
    checks.exact = {"expected": text, "strip": False}


def _regex(checks: _Checks, value: Any, where: str, base: Path) -> None:
    if not isinstance(value, str) or not value:
        raise _Refused(f"{where}.value", "expected a regular expression")
    if checks.regex is not None:
        raise _Refused(f"{where}.type", "a second regex: one case holds one regex check")
    checks.regex = js_regex(value, f"{where}.value")


def _json(strict: bool) -> Any:
    def mapper(checks: _Checks, value: Any, where: str, base: Path) -> None:
        if checks.json is not None:
            raise _Refused(f"{where}.type", "a second is-json or contains-json: one case holds one json check")
        spec: dict[str, Any] = {"strict": True} if strict else {}
        schema = _schema(value, where, base)
        if schema is not None:
            spec["schema"] = schema
        checks.json = spec

    return mapper


def _schema(value: Any, where: str, base: Path) -> Any:
    """An is-json / contains-json value as a JSON Schema (ajv's default draft 7 unless it names one), or None."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.startswith("file://"):
        path = base / value.removeprefix("file://")
        if path.suffix not in (".json", ".yaml", ".yml"):
            raise _Refused(f"{where}.value", f"the schema {value!r} is made by code or is not a JSON or YAML file")
        try:
            value = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise _Refused(f"{where}.value", f"cannot read the schema {value!r}: {getattr(exc, 'strerror', None) or exc}") from None
    elif isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            value = None
    if isinstance(value, bool):
        return value
    if not isinstance(value, dict):
        raise _Refused(f"{where}.value", "expected a JSON Schema (an object), which promptfoo also requires")
    return value if "$schema" in value else {"$schema": _DRAFT_07, **value}


_MAPPERS: dict[str, Any] = {
    "equals": _equals,
    "contains": _contains("all", False, False),
    "icontains": _contains("all", True, False),
    "contains-all": _contains("all", False, True),
    "icontains-all": _contains("all", True, True),
    "contains-any": _contains("any", False, True),
    "icontains-any": _contains("any", True, True),
    "not-contains": _contains("none", False, False),
    "not-icontains": _contains("none", True, False),
    "regex": _regex,
    "is-json": _json(strict=True),
    "contains-json": _json(strict=False),
}
"""Assert types with a faithful check; `not-contains-any` is `none` too (no listed value may appear)."""
_MAPPERS["not-contains-any"] = _contains("none", False, True)
_MAPPERS["not-icontains-any"] = _contains("none", True, True)


def js_regex(pattern: str, where: str = "regex") -> str:
    """A JavaScript pattern (no flags) as a Python pattern that matches the same strings.

    JavaScript's `\\d`, `\\w` and `\\b` are ASCII, its `$` is the end of the
    input (Python's also matches before a final newline), and its `\\s`
    includes Unicode spaces: the pattern is compiled with `(?a)` and `$` and
    `\\s`/`\\S` are spelled out. Named groups become Python's. What Python
    cannot compile is refused by name.
    """
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_JS_WHITESPACE if in_class else f"[{_JS_WHITESPACE}]")
            elif nxt == "S":
                if in_class:
                    raise _Refused(where, "\\S inside a character class has no Python equivalent with JavaScript's whitespace")
                out.append(f"[^{_JS_WHITESPACE}]")
            elif nxt == "k" and pattern[i + 2 : i + 3] == "<":
                end = pattern.find(">", i)
                out.append(f"(?P={pattern[i + 3 : end]})")
                i = end + 1
                continue
            else:
                out.append(c + nxt)
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            if pattern[i + 1 : i + 2] == "]":  # `[]` matches nothing in JavaScript
                raise _Refused(where, "`[]` (an empty class) has no Python equivalent")
        elif c == "$":
            out.append(r"\Z")
        elif pattern.startswith("(?<", i) and pattern[i + 3 : i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        else:
            out.append(c)
        i += 1
    translated = "(?a)" + "".join(out)
    try:
        re.compile(translated)
    except re.error as exc:
        raise _Refused(where, f"a JavaScript pattern Python cannot match the same way ({exc})") from None
    return translated


# ------------------------------------------------------------------ the importer


def read_promptfoo(src: Path, options: ImportOptions) -> Iterator[Item]:
    """Every case of a promptfoo config or tests file (see the module doc)."""
    problems: list[Problem] = []
    config: _Doc | None = None
    if src.suffix in (".yaml", ".yml", ".json"):
        doc = _load_doc(src, problems)
        if doc is None:
            yield from problems
            return
        if isinstance(doc.data, dict) and ({"prompts", "tests"} & set(doc.data)):
            config = doc
    prompts: list[_Prompt] = []
    default: dict[str, Any] = {}
    default_asserts: list[_Assert] = []
    if config is not None:
        cfg = config.data
        if options.prompt is not None:
            raise ConfigError([Problem("command line", None, "--prompt", f"{src} is a promptfoo config: its own `prompts` are used")])
        for p in _prompts_of(cfg.get("prompts"), src.parent, config, "prompts"):
            if isinstance(p, _Prompt):
                prompts.append(p)
            else:
                yield p
        if cfg.get("providers"):
            yield Note("promptfoo providers are not imported: each case is sent to --baseline and --candidate")
        dt = cfg.get("defaultTest")
        if isinstance(dt, dict):
            default = dt
            default_asserts = _asserts_of(dt, config, ("defaultTest",), problems)
        elif dt is not None:
            yield Unmapped(
                Problem(str(src), config.line("defaultTest"), "defaultTest", "a defaultTest from a file is not imported: write it inline")
            )
        entries = cfg.get("tests")
        if entries is None:
            yield Problem(str(src), None, "tests", "the config has no tests")
            return
        listed = entries if isinstance(entries, list) else [entries]
        tests = [
            t
            for i, e in enumerate(listed)
            for t in _tests_of(e, src.parent, config, ("tests", i) if isinstance(entries, list) else ("tests",), problems)
        ]
    else:
        if options.prompt is None:
            raise ConfigError(
                [Problem("command line", None, "--prompt", f"{src} is a tests file: give the prompt template (text, or file://PATH)")]
            )
        for p in _prompts_of(options.prompt, Path.cwd(), None, "--prompt"):
            if isinstance(p, _Prompt):
                prompts.append(p)
            else:
                yield p
        tests = list(_tests_file(src, problems))
    yield from problems
    usable = []
    for prompt in prompts:  # a template this module cannot render is named once, not once per test
        try:
            _check_template(prompt)
        except _Refused as r:
            yield Unmapped(Problem(prompt.path, prompt.line, prompt.where, r.message))
            continue
        usable.append(prompt)
    prompts = usable
    if not prompts:
        return
    stem = stem_of(src)
    category = options.category or stem
    for n, test in enumerate(tests, 1):
        yield from test.problems
        for k, prompt in enumerate(prompts, 1):
            case_id = f"{stem}-{n}-p{k}" if len(prompts) > 1 else f"{stem}-{n}"
            yield _draft(test, default, default_asserts, prompt, case_id, category, k if len(prompts) > 1 else None)


def _draft(
    test: _Test, default: dict[str, Any], default_asserts: list[_Assert], prompt: _Prompt, case_id: str, category: str, k: int | None
) -> Drafted | Unmapped:
    raw = test.raw
    path = str(test.path)

    def refused(r: _Refused) -> Problem:
        fld = r.field if r.field.startswith(("the prompt at ", "--prompt", "defaultTest")) else _join(test.at, r.field)
        return Problem(path, test.line, fld, r.message)

    try:
        for key in raw:
            if key.startswith("__"):
                raise _Refused(key, f"the {key} column is not imported (it changes the prompt or replaces the answer)")
            if key not in _TEST_KEYS:
                raise _Refused(key, f"{key!r} on a test is not imported")
        options = {**(default.get("options") or {}), **(raw.get("options") or {})}
        odd = sorted(set(options) - _HARMLESS_OPTIONS)
        if odd:
            raise _Refused(
                f"options.{odd[0]}", f"the test option {odd[0]!r} is not imported (it changes the prompt, the answer or the grader)"
            )
        if "threshold" in default:
            raise _Refused("defaultTest.threshold", "a score threshold over weighted asserts is not imported")
        variables = {**_vars_of(default.get("vars")), **_vars_of(raw.get("vars"))}
        messages = _request(prompt, variables)
    except _Refused as r:
        return Unmapped(refused(r))
    checks = _Checks()
    unmapped: list[Problem] = []
    for a, fld, line, where in [*default_asserts, *test.asserts]:
        try:
            _map_assert(checks, a, fld, variables, where.parent)
        except _Refused as r:
            unmapped.append(Problem(str(where), line or test.line, r.field, r.message))
    case: dict[str, Any] = {"id": case_id, "category": category, "messages": messages}
    mapped = checks.as_dict()
    if mapped:
        case["checks"] = mapped
    tags = _tags({**(default.get("metadata") or {}), **(raw.get("metadata") or {})})
    if isinstance(raw.get("description"), str) and raw["description"]:
        tags["description"] = raw["description"]
    if k is not None:
        tags["prompt"] = str(k)
    if tags:
        case["tags"] = tags
    case["source"] = f"promptfoo {path}" + (f":{test.line}" if test.line else "") + (f" ({test.at})" if test.at else "")
    return Drafted(case, path, test.line, test.at, tuple(unmapped))


def _tags(metadata: Any) -> dict[str, str]:
    if not isinstance(metadata, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in metadata.items()}


def _join(prefix: str, fld: str) -> str:
    if not prefix:
        return fld
    return prefix + (fld if fld.startswith("[") else "." + fld)
