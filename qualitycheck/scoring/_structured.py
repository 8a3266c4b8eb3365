"""Structured answers: JSON (parse + JSON Schema) and config files (YAML/TOML/INI/JSON).

Strict parse (the whole answer is the document) and lenient parse (inside a
fence, or embedded in prose) are both recorded: a check passes on the lenient
parse, and the strict flag is kept in the detail because a model that starts
fencing its JSON has drifted even when every consumer still copes.
"""

from __future__ import annotations

import configparser
import json
import tomllib
from collections.abc import Sequence
from typing import Any, Literal

import yaml
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from qualitycheck.core._cases import Case
from qualitycheck.core._records import Response
from qualitycheck.scoring._base import BASELINE, CheckSpec, LoadContext, Outcome, Scorer, check_family
from qualitycheck.scoring._extract import JsonFound, fences, find_json, loads_strict_json

__all__ = ["ConfigParseScorer", "JsonCheck", "JsonParseScorer", "JsonSchemaScorer", "YamlCheck", "canonical_json", "json_path"]

MAX_SCHEMA_ERRORS = 10
_MSG_CHARS = 300


class JsonCheck(CheckSpec):
    """`json: true` checks that the answer holds JSON; a schema (inline or a file) adds `json_schema`."""

    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    schema_file: str | None = None
    """A JSON Schema file relative to the suite file; the loader inlines it as `schema`."""
    strict: bool = False
    """The whole answer must be the JSON document (surrounding whitespace aside): JSON in a fence or in prose
    fails `json_parse`, and `json_schema` validates only a whole-answer document. Off: found anywhere passes."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {} if data is True else data

    @model_validator(mode="after")
    def _one_schema(self) -> JsonCheck:
        if self.schema_ is not None and self.schema_file is not None:
            raise ValueError("give either schema or schema_file, not both")
        return self

    @model_serializer(mode="wrap")
    def _lenient_unwritten(self, handler: SerializerFunctionWrapHandler) -> Any:
        """`strict: false` is not written: a case's content hash (resume) stays what it was before the option existed."""
        out = handler(self)
        if isinstance(out, dict) and not self.strict:
            out.pop("strict", None)
        return out


class YamlCheck(CheckSpec):
    """A config-file answer; its check is named after the format (`yaml_parse`, `toml_parse`, ...)."""

    format: Literal["yaml", "toml", "ini", "json"] = "yaml"
    required_keys: list[str] = Field(default_factory=list)
    """Dotted paths that must exist in the parsed document."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {} if data is True else data


def canonical_json(value: Any) -> str:
    """One spelling per JSON value: sorted keys, no spaces, 1 == 1.0 kept apart by type."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_path(parts: Any) -> str:
    """`$.items[0].qty` from a jsonschema error's absolute_path."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if str(p).isidentifier() else f"[{json.dumps(p)}]")
    return out


def _found_detail(found: JsonFound, answer: Response) -> dict[str, Any]:
    d: dict[str, Any] = {"strict": found.mode == "strict", "lenient": found.mode is not None, "found_in": found.mode}
    if found.mode is None:
        d["error"] = found.error
        d["truncated"] = answer.finish_reason == "length"
    return d


class JsonParseScorer:
    """`json_parse`: passes when JSON is found strictly or leniently (see module doc).

    Against the baseline it also records `same_as_baseline`: both answers
    hold the same JSON value after canonicalisation (key order and spacing
    do not matter; None when either side has no JSON).
    """

    check = "json_parse"

    def __init__(self, strict: bool = False):
        self.strict = strict

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        found = _found(answer.text, self.strict)
        detail = _found_detail(found, answer)
        if self.strict:
            detail["required"] = "strict"
        if answer.target != BASELINE and baseline is not None and baseline.error is None:
            other = _found(baseline.text, self.strict)
            detail["same_as_baseline"] = (
                None if found.mode is None or other.mode is None else canonical_json(found.value) == canonical_json(other.value)
            )
        return Outcome("pass" if found.mode else "fail", found.mode, detail)


def _found(text: str, strict: bool) -> JsonFound:
    """`find_json`, or with `strict` only a whole-answer document (what was found elsewhere is named in the error)."""
    found = find_json(text)
    if not strict or found.mode in (None, "strict"):
        return found
    return JsonFound(
        None, error=f"the answer is not one JSON document (JSON was found {found.mode}, and strict: true asks for the whole answer)"
    )


class JsonSchemaScorer:
    """`json_schema`: the (leniently found) JSON validates against the case's schema.

    The schema's `$schema` picks the draft (Draft 2020-12 when absent) and
    `format` is asserted, not just annotated. Failing paths and messages are
    kept (first MAX_SCHEMA_ERRORS, deepest-first order of jsonschema).
    """

    check = "json_schema"

    def __init__(self, schema: dict[str, Any] | bool, strict: bool = False):
        from jsonschema import validators

        self.strict = strict

        cls = validators.validator_for(schema, default=validators.Draft202012Validator)
        cls.check_schema(schema)  # type: ignore[arg-type]  # a boolean schema is valid JSON Schema; the stubs allow mappings only
        self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self._draft = cls.__name__

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        found = _found(answer.text, self.strict)
        if found.mode is None:
            return Outcome("fail", None, {**_found_detail(found, answer), "reason": "no JSON to validate"})
        errors = sorted(self._validator.iter_errors(found.value), key=lambda e: (list(e.absolute_path), e.message))
        detail: dict[str, Any] = {
            "found_in": found.mode,
            "strict": found.mode == "strict",
            "validator": self._draft,
            "error_count": len(errors),
        }
        if errors:
            detail["errors"] = [
                {
                    "path": json_path(e.absolute_path),
                    "message": e.message[:_MSG_CHARS],
                    "keyword": e.validator,
                    "schema_path": "/".join(map(str, e.absolute_schema_path)),
                }
                for e in errors[:MAX_SCHEMA_ERRORS]
            ]
            return Outcome("fail", len(errors), detail)
        return Outcome("pass", 0, detail)


# ------------------------------------------------------------ config files

_LANGS = {"yaml": {"yaml", "yml"}, "toml": {"toml"}, "ini": {"ini", "cfg", "conf", "dosini", "properties"}, "json": {"json"}}


def _parse(fmt: str, text: str) -> Any:
    if fmt == "yaml":
        doc = yaml.safe_load(text)
        if not isinstance(doc, (dict, list)):
            # Any prose is a valid YAML scalar; a config is a mapping or a list.
            raise ValueError(f"parsed as a YAML {type(doc).__name__}, not a mapping or list")
        return doc
    if fmt == "toml":
        return tomllib.loads(text)
    if fmt == "ini":
        cp = configparser.ConfigParser(interpolation=None, strict=True)
        cp.read_string(text)
        if not cp.sections():
            raise ValueError("no [section] in the INI text")
        return {s: dict(cp.items(s, raw=True)) for s in cp.sections()}
    return loads_strict_json(text)


def _missing(doc: Any, dotted: str) -> bool:
    cur = doc
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return True
    return False


class ConfigParseScorer:
    """`yaml_parse` / `toml_parse` / `ini_parse` / `json_parse` (config files).

    Strict: the whole answer parses; lenient: a fenced block labelled with
    the format (or unlabelled) parses. Then every `required_keys` dotted path
    (`server.port`, `items.0.name`; INI: `section.key`) must exist.
    """

    def __init__(self, spec: YamlCheck):
        self.spec = spec
        self.check = f"{spec.format}_parse"

    def score(self, answer: Response, baseline: Response | None) -> Outcome:
        fmt = self.spec.format
        mode, doc, error = None, None, None
        try:
            doc, mode = _parse(fmt, answer.text), "strict"
        except Exception as exc:  # each parser raises its own error family
            error = f"{type(exc).__name__}: {exc}"[:_MSG_CHARS]
            for f in fences(answer.text):
                if f.lang in _LANGS[fmt] or f.lang == "":
                    try:
                        doc, mode = _parse(fmt, f.body), "fenced"
                        break
                    except Exception:
                        continue
        detail: dict[str, Any] = {"format": fmt, "strict": mode == "strict", "lenient": mode is not None, "found_in": mode}
        if mode is None:
            detail["error"] = error
            detail["truncated"] = answer.finish_reason == "length"
            return Outcome("fail", None, detail)
        missing = [k for k in self.spec.required_keys if _missing(doc, k)]
        if missing:
            detail["missing_keys"] = missing
            return Outcome("fail", mode, detail)
        return Outcome("pass", mode, detail)


# ------------------------------------------------------------ the families


def _json_names(spec: JsonCheck) -> list[str]:
    return ["json_parse", "json_schema"] if spec.schema_ is not None or spec.schema_file is not None else ["json_parse"]


def _load_json(spec: JsonCheck, ctx: LoadContext) -> JsonCheck:
    """Inline a `schema_file` (relative to the suite file) and check that the schema is one."""
    if spec.schema_file is not None:
        f = ctx.folder / spec.schema_file
        try:
            spec = JsonCheck.model_validate({"schema": json.loads(f.read_text(encoding="utf-8"))})
        except OSError as exc:
            ctx.problem("schema_file", f"cannot read {f}: {exc.strerror}")
            return spec
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            ctx.problem("schema_file", f"{f} is not JSON: {exc}")
            return spec
        field = "schema_file"
    else:
        field = "schema"
    if isinstance(spec.schema_, dict):
        from jsonschema import SchemaError, validators

        try:
            validators.validator_for(spec.schema_, default=validators.Draft202012Validator).check_schema(spec.schema_)
        except SchemaError as exc:
            ctx.problem(field, f"not a valid JSON Schema: {exc.message}")
    return spec


@check_family("json", spec=JsonCheck, names=("json_parse", "json_schema"), produces=_json_names, load=_load_json)
def json_family(spec: JsonCheck, case: Case) -> Sequence[Scorer]:
    out: list[Scorer] = [JsonParseScorer(spec.strict)]
    if spec.schema_ is not None:
        out.append(JsonSchemaScorer(spec.schema_, spec.strict))
    return out


@check_family(
    "yaml", spec=YamlCheck, names=("yaml_parse", "toml_parse", "ini_parse", "json_parse"), produces=lambda spec: [f"{spec.format}_parse"]
)
def config_family(spec: YamlCheck, case: Case) -> Sequence[Scorer]:
    return [ConfigParseScorer(spec)]
