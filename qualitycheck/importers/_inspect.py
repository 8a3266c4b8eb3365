"""Inspect AI eval logs → cases: what each sample sent the model, checked as its scorers checked it.

The log is read with inspect's own reader (`inspect_ai.log.read_eval_log`,
attachments resolved), so every format inspect writes (`.eval`, `.json`)
reads as inspect reads it. A sample becomes one case (its first epoch):

- the request is the messages the model was sent, the sample's messages
  before its answer, so the solvers' system message and prompt template
  are kept; a sample whose model was called more than once (tools, agents,
  multi-turn solvers) is refused by name;
- the generation settings are the eval's (`temperature`, `top_p`,
  `max_tokens`, `seed`, `stop_seqs`, `top_k`, penalties); any other setting
  is refused by name;
- the scorers, read from `inspect_ai/scorer/_match.py` and `_common.py`:
  `includes(ignore_case)` → `contains` (any target, casefolded like
  inspect); `match(location, ignore_case)` strips whitespace and ASCII
  punctuation from both ends of the answer and target, then compares at
  the begin, end, exactly or anywhere → `regex` with the same edges
  (`any` → `contains`); `match(numeric=True)`, `exact` (SQuAD-style
  normalisation), model-graded and other scorers are refused by name.

`inspect_ai` is the `inspect` extra, imported only here.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.importers._common import Drafted, ImportOptions, Item, Unmapped, regex_alternation, stem_of

__all__ = ["read_inspect_log"]

_PARAMS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "seed": "seed",
    "stop_seqs": "stop",
    "top_k": "top_k",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
}
"""Inspect's generation settings that are request fields of an OpenAI-compatible endpoint."""
_IGNORED = {"max_retries", "timeout", "attempt_timeout", "stream_idle_timeout", "max_connections", "adaptive_connections", "cache", "batch"}
"""Settings of how inspect called the model, not of what it asked (retries, timeouts, concurrency, caching)."""
_EDGE = "[" + re.escape(string.whitespace + string.punctuation) + "]*"
"""What inspect's `strip_punctuation` removes from each end of a stripped answer."""


def _inspect() -> Any:
    try:
        from inspect_ai import log
    except ImportError:
        raise ConfigError(
            [
                Problem(
                    "command line", None, "FORMAT", "the inspect format needs the `inspect_ai` package: pip install 'qualitycheck[inspect]'"
                )
            ]
        ) from None
    return log


def _params(log: Any, where: str) -> tuple[dict[str, Any], list[Problem]]:
    merged: dict[str, Any] = {}
    for cfg in (log.eval.model_generate_config, log.plan.config):
        if cfg is not None:
            merged.update({k: v for k, v in cfg.model_dump().items() if v is not None})
    params: dict[str, Any] = {}
    refused: list[Problem] = []
    for key, value in merged.items():
        if key in _PARAMS:
            params[_PARAMS[key]] = value
        elif key not in _IGNORED and key != "system_message":  # a system message is in the sample's messages
            refused.append(Problem(where, None, f"plan.config.{key}", f"the generation setting {key!r} has no request field here"))
    return params, refused


def _scorers(log: Any) -> list[tuple[str, dict[str, Any]]]:
    if getattr(log.eval, "scorers", None):
        return [(s.name.split("/")[-1], dict(s.options or {})) for s in log.eval.scorers]
    if log.results is not None:
        return [(s.scorer.split("/")[-1], dict(s.params or {})) for s in log.results.scores]
    return []


def _scorer_check(name: str, opts: dict[str, Any], targets: list[str]) -> tuple[str, Any]:
    """(family, spec) of one scorer over a sample's targets; ValueError names why it has none."""
    if name == "includes":
        return "contains", {"any": targets, "ignore_case": bool(opts.get("ignore_case", True))}
    if name != "match":
        raise ValueError(f"the scorer {name!r} has no qualitycheck check (includes and match have)")
    if opts.get("numeric"):
        raise ValueError("match(numeric=True) compares numbers after inspect's own number parsing, which no check reproduces")
    location = opts.get("location", "end")
    ignore_case = bool(opts.get("ignore_case", True))
    fold = str.casefold if ignore_case else str
    cores = [fold(t.strip()).strip(string.whitespace + string.punctuation) for t in targets]
    if location == "any":
        return "contains", {"any": [c for c in cores if c] or [""], "ignore_case": ignore_case}
    alt = regex_alternation(cores)
    flags = "(?i)" if ignore_case else ""
    pattern = {
        "begin": rf"{flags}\A\s*{_EDGE}{alt}",
        "end": rf"{flags}{alt}{_EDGE}\s*\Z",
        "exact": rf"{flags}{_EDGE}{alt}{_EDGE}",
    }.get(location)
    if pattern is None:
        raise ValueError(f"match(location={location!r}) is not one of begin, end, exact, any")
    return "regex", {"pattern": pattern, "mode": "fullmatch"} if location == "exact" else pattern


def _generated(m: Any) -> bool:
    """An answer of the model under evaluation (`source: generate`), not an assistant turn of the input (few-shot)."""
    source = getattr(m, "source", None)
    if source is not None:
        return bool(m.role == "assistant" and source == "generate")
    return bool(m.role == "assistant")  # logs written before messages had a source: every assistant turn


def _messages(sample: Any) -> list[dict[str, Any]]:
    """The messages the model was sent for the sample's answer; ValueError names why there is no single request."""
    sent = list(sample.messages or [])
    answers = [i for i, m in enumerate(sent) if _generated(m)]
    if len(answers) > 1 or (answers and any(m.role == "tool" for m in sent[answers[0] :])):
        raise ValueError(
            f"the model was called {max(len(answers), 2)} times for this sample (tools or a multi-turn solver): only one request per case is imported"
        )
    if answers:
        sent = sent[: answers[0]]
    elif not sent:
        inp = sample.input
        if isinstance(inp, str):
            return [{"role": "user", "content": inp}]
        sent = list(inp)
    out = []
    for m in sent:
        if not isinstance(m.content, str) and any(getattr(c, "type", "text") != "text" for c in m.content):
            raise ValueError("a message holds images, audio or other non-text content")
        out.append({"role": m.role, "content": m.text})
    if not out:
        raise ValueError("the sample has no input")
    return out


def read_inspect_log(src: Path, options: ImportOptions) -> Iterator[Item]:
    """Every sample of an inspect eval log (see the module doc)."""
    log_api = _inspect()
    where = str(src)
    if not src.is_file():
        raise ConfigError([Problem(where, None, "", "no such log file")])
    try:
        log = log_api.read_eval_log(where, resolve_attachments=True)
    except Exception as exc:  # inspect raises its own and pydantic's errors for a file that is not a log
        raise ConfigError(
            [Problem(where, None, "", f"not an inspect eval log inspect can read ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")]
        ) from None
    if not log.samples:
        yield Problem(where, None, "samples", f"the log holds no samples (status {log.status})")
        return
    params, refused = _params(log, where)
    for p in refused:
        yield Unmapped(p)
    scorers: list[tuple[str, dict[str, Any]]] = []
    families: set[str] = set()
    for k, (name, opts) in enumerate(_scorers(log)):  # refused once for the log, not once per sample
        try:
            family, _ = _scorer_check(name, opts, [""])
        except ValueError as exc:
            yield Unmapped(Problem(where, None, f"eval.scorers[{k}]", str(exc)))
            continue
        if family in families:
            yield Unmapped(
                Problem(where, None, f"eval.scorers[{k}]", f"a second scorer checked as {family}: one case holds one {family} check")
            )
            continue
        families.add(family)
        scorers.append((name, opts))
    task = stem_of(log.eval.task or src.name)
    category = options.category or task
    seen: set[str] = set()
    for sample in log.samples:
        sid = str(sample.id)
        if sid in seen:  # later epochs ask the same
            continue
        seen.add(sid)
        yield _sample(sample, sid, where, category, params, scorers)


def _sample(
    sample: Any, sid: str, where: str, category: str, params: dict[str, Any], scorers: list[tuple[str, dict[str, Any]]]
) -> Drafted | Unmapped:
    at = f"samples[id={sid}]"
    try:
        messages = _messages(sample)
    except ValueError as exc:
        return Unmapped(Problem(where, None, at, str(exc)))
    target = sample.target
    targets = [target] if isinstance(target, str) else list(target)
    checks = dict(_scorer_check(name, opts, targets) for name, opts in scorers)
    case: dict[str, Any] = {"id": sid, "category": category, "messages": messages}
    if params:
        case["params"] = params
    if checks:
        case["checks"] = checks
    if sample.metadata:
        case["tags"] = {str(k): v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in sample.metadata.items()}
    case["source"] = f"inspect log {where} sample {sid}"
    return Drafted(case, where, None, at)
