"""OpenAI evals samples (JSONL of `input` and `ideal`) → cases, checked as the eval's class checks them.

openai/evals registers an eval in a registry YAML: `name: {id: name.split.version}`
and `name.split.version: {class: module:Class, args: {samples_jsonl: ...}}`.
With `--registry FILE --eval NAME` the check follows the class, read from
`evals/elsuite/basic/*.py` and `evals/api.py`:

- `Match` passes when the answer *starts with* an ideal answer
  (`record_and_check_match`: `sampled.startswith(option)`), asked at
  temperature 0 → `regex` `\\A(?:ideal|...)`.
- `Includes` passes when an ideal answer appears in the answer (`rfind`,
  `ignore_case` from its args, default off) → `contains` (`any`).
- `FuzzyMatch` normalises both sides (lower case, ASCII punctuation and the
  articles a/an/the removed, whitespace collapsed) and passes when either
  contains the other, asked at temperature 0 with its `max_tokens` (100) →
  `contains` ignoring case (`any`): the normalisation and an answer that is
  contained in the ideal are not reproduced, which the import says.

Without a registry entry the check is `exact` against the ideal answer (a
list of ideals: the stripped answer is one of them, a `regex` fullmatch).
Other classes (model-graded, few-shot, custom) are refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from qualitycheck.core._cases import yaml_problem
from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.importers._common import Drafted, ImportOptions, Item, Note, Unmapped, regex_alternation, stem_of

__all__ = ["EVAL_CLASSES", "read_openai_evals"]

EVAL_CLASSES = {
    "evals.elsuite.basic.match:Match": "Match",
    "evals.elsuite.basic.includes:Includes": "Includes",
    "evals.elsuite.basic.fuzzy_match:FuzzyMatch": "FuzzyMatch",
}
"""The registry's class paths of the basic evals mapped here."""

_FUZZY_NOTE = (
    "FuzzyMatch is imported as contains ignoring case: openai/evals also drops punctuation and the articles a/an/the "
    "and passes an answer that the ideal contains, which qualitycheck's contains check does not"
)


def _entry(registry: Path, name: str) -> tuple[dict[str, Any], str]:
    """The registry entry that holds the eval's class and args, following `id` from its short name."""
    try:
        data = yaml.safe_load(registry.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(str(registry), None, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_problem(str(registry), exc)]) from None
    if not isinstance(data, dict):
        raise ConfigError([Problem(str(registry), None, "", "expected a mapping of eval names (an openai/evals registry file)")])
    seen = [name]
    entry = data.get(name)
    while isinstance(entry, dict) and "class" not in entry and isinstance(entry.get("id"), str) and entry["id"] not in seen:
        seen.append(entry["id"])
        entry = data.get(entry["id"])
    if not isinstance(entry, dict) or not isinstance(entry.get("class"), str):
        names = ", ".join(sorted(k for k, v in data.items() if isinstance(v, dict) and "class" not in v)) or "none"
        raise ConfigError([Problem(str(registry), None, name, f"no eval with a class under this name (evals here: {names})")])
    return entry, seen[-1]


def _check(kind: str | None, args: dict[str, Any], ideals: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(checks, params) of one sample, as its eval class checks and asks it."""
    if kind == "Match":
        return {"regex": r"\A" + regex_alternation(ideals)}, {"temperature": 0}
    if kind == "Includes":
        return {"contains": {"any": ideals, "ignore_case": bool(args.get("ignore_case", False))}}, {}
    if kind == "FuzzyMatch":
        return {"contains": {"any": ideals, "ignore_case": True}}, {"temperature": 0, "max_tokens": int(args.get("max_tokens", 100))}
    if len(ideals) == 1:
        return {"exact": ideals[0]}, {}
    return {"regex": {"pattern": regex_alternation(ideals), "mode": "fullmatch"}}, {}


def read_openai_evals(src: Path, options: ImportOptions) -> Iterator[Item]:
    """Every sample of an evals samples file (see the module doc)."""
    kind: str | None = None
    args: dict[str, Any] = {}
    name = stem_of(src)
    if options.registry is not None:
        if not options.eval_name:
            raise ConfigError([Problem("command line", None, "--eval", "required with --registry: the eval's name in it")])
        entry, name = _entry(Path(options.registry), options.eval_name)
        args = entry.get("args") or {}
        kind = EVAL_CLASSES.get(entry["class"])
        if kind is None:
            yield Unmapped(
                Problem(
                    options.registry,
                    None,
                    f"{name}.class",
                    f"the eval class {entry['class']!r} has no qualitycheck mapping (Match, Includes and FuzzyMatch have)",
                )
            )
            return
        if int(args.get("num_few_shot", 0) or 0) > 0:
            yield Unmapped(
                Problem(options.registry, None, f"{name}.args.num_few_shot", "few-shot prompts built from another file are not imported")
            )
            return
        if kind == "FuzzyMatch":
            yield Note(_FUZZY_NOTE)
    elif options.eval_name is not None:
        raise ConfigError([Problem("command line", None, "--eval", "needs --registry: the file that registers the eval")])
    else:
        yield Note("no --registry given: each sample is checked with exact against its ideal answer")
    category = options.category or name.split(".")[0]
    try:
        text = src.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        yield Problem(str(src), None, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}")
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as exc:
            yield Problem(str(src), n, "", f"bad JSON: {exc.msg} (column {exc.colno})")
            continue
        yield _sample(sample, src, n, kind, args, f"{stem_of(name)}-{n}", category)


def _sample(sample: Any, src: Path, n: int, kind: str | None, args: dict[str, Any], case_id: str, category: str) -> Drafted | Problem:
    path = str(src)
    if not isinstance(sample, dict):
        return Problem(path, n, "", f"expected a sample object, got {type(sample).__name__}")
    if "input" not in sample:
        return Problem(path, n, "input", "required field is missing (the prompt: chat messages or a string)")
    if "ideal" not in sample:
        return Problem(path, n, "ideal", "required field is missing (the reference answer, or a list of them)")
    ideal = sample["ideal"]
    ideals = [ideal] if isinstance(ideal, str) else ideal
    if not isinstance(ideals, list) or not ideals or not all(isinstance(i, str) for i in ideals):
        return Problem(path, n, "ideal", "expected a string or a non-empty list of strings")
    checks, params = _check(kind, args, ideals)
    case: dict[str, Any] = {"id": case_id, "category": category}
    prompt = sample["input"]
    if isinstance(prompt, str):
        case["prompt"] = prompt
    else:
        case["messages"] = prompt
    if params:
        case["params"] = params
    case["checks"] = checks
    extra = {k: v for k, v in sample.items() if k not in ("input", "ideal")}
    if extra:
        case["tags"] = {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in extra.items()}
    case["source"] = f"openai evals {path}:{n}"
    return Drafted(case, path, n)
