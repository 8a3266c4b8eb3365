"""LLM judges for open-ended answers, called only where the two sides differ.

A judge is expensive and biased, so this stage is built around its failure
modes rather than around the happy path:

- byte-identical baseline/candidate answers are a tie without any call;
- pairwise judges run in both orders, and a verdict that follows the position
  instead of the content is a tie marked position-inconsistent;
- a judge answer that cannot be parsed is asked again a bounded number of
  times and then recorded as a judge *error*, never as a tie or a pass;
- answers are fenced by delimiters carrying a random per-call nonce, text that
  looks like a delimiter or a verdict marker is broken up before the judge
  sees it, the judge's *last* verdict marker wins, and answers that talk to
  the judge are flagged in the score detail;
- every judge call is cached in the run folder under a key made of the judge
  endpoint, its model, the judge definition's content hash and the exact
  inputs, so `qualitycheck score` re-judges nothing it has already judged and
  no key can let one endpoint's or one side's output stand in for another's.

Judge definitions are YAML files (see judges/ and docs/stages/judge.md); a case
names one in `checks.judge.mode`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from qualitycheck.core._cases import Case
from qualitycheck.core._config import HttpPolicy, JudgeTarget, RunOptions
from qualitycheck.core._errors import ConfigError, Problem, SuiteError
from qualitycheck.core._progress import Progress
from qualitycheck.core._records import Response, Score, ScoreStatus
from qualitycheck.core._store import RunStore
from qualitycheck.scoring._base import NOT_FOR_SAMPLED

if TYPE_CHECKING:  # aiohttp is imported with the first judge call, not with the judge definitions
    import aiohttp

    from qualitycheck.core._http import HttpClient

__all__ = [
    "CACHE_NAME",
    "JudgeCache",
    "JudgeDefinition",
    "JudgeOptions",
    "injection_signals",
    "judge_dirs",
    "load_judge_file",
    "load_judges",
    "neutralise",
    "score_judge",
    "validate_judge_checks",
]

CACHE_NAME = "judge_cache.sqlite"
BUILTIN_DIR = Path(__file__).resolve().parents[1] / "builtin_judges"
"""The judges shipped with qualitycheck: the repository's judges/, linked into the package so wheels carry them."""

KINDS = ("pairwise", "single")
VARIABLES = {
    "pairwise": {"question", "answer_a", "answer_b", "rubric", "reference", "nonce"},
    "single": {"question", "answer", "rubric", "reference", "nonce"},
}
PLACEHOLDER = re.compile(r"\{(\w+)\}")
EXCERPT_CHARS = 600

_RUN_DEFAULTS = RunOptions()


@dataclass(frozen=True)
class JudgeOptions:
    """What the judge stage reads of a run's settings; the pipeline makes it from the config (`of_run`)."""

    http: HttpPolicy = _RUN_DEFAULTS.http
    """How the judge endpoint is called (a run's `RunOptions.http`); `http.concurrency` calls at most in flight."""
    answer_retries: int = _RUN_DEFAULTS.judge_retries
    """Times an answer that does not parse is asked again (`run.judge_retries`), beyond the HTTP layer's retries."""
    judges_dir: str | None = None
    """A folder of definitions searched before ./judges and the built-ins (the config's `judges_dir`)."""
    source: str = "config"
    """The file `judges_dir` was read from, named when it is not a folder."""

    @classmethod
    def of_run(cls, run: RunOptions, *, judges_dir: str | None = None, source: str | None = None) -> JudgeOptions:
        """A run's judge settings: its HTTP policy and `judge_retries`, and where the config keeps definitions."""
        return cls(http=run.http, answer_retries=run.judge_retries, judges_dir=judges_dir, source=source or "config")


# ------------------------------------------------------------------ definitions


@dataclass(frozen=True)
class JudgeDefinition:
    """One judge file: how to ask, and how to read the answer.

    `kind` pairwise: the prompt shows two answers ({answer_a}, {answer_b}) and
    the verdict pattern's first group maps (via `verdict_map`) to a, b or tie.
    `kind` single: the prompt shows one answer ({answer}) and the first group
    is a number inside `score_range`; the two sides' grades are compared, and
    differences up to `tie_margin` are a tie.
    """

    name: str
    kind: str
    prompt: str
    pattern: re.Pattern[str]
    system: str = ""
    verdict_map: dict[str, str] = field(default_factory=dict)
    score_range: tuple[float, float] = (1.0, 10.0)
    tie_margin: float = 0.0
    defaults: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    path: str = ""
    content_hash: str = ""

    @property
    def variables(self) -> set[str]:
        return set(PLACEHOLDER.findall(self.system)) | set(PLACEHOLDER.findall(self.prompt))

    def parse(self, text: str) -> tuple[str, Any] | None:
        """(marker as written, meaning) from the judge's LAST verdict marker, or None."""
        matches = list(self.pattern.finditer(text or ""))
        if not matches:
            return None
        raw = matches[-1].group(1)
        if self.kind == "pairwise":
            meaning = self.verdict_map.get(raw, self.verdict_map.get(raw.strip().upper()))
            return (raw, meaning) if meaning is not None else None
        try:
            value = float(raw)
        except ValueError:
            return None
        lo, hi = self.score_range
        if not lo <= value <= hi:
            return None
        return raw, int(value) if value.is_integer() else value


def _line_of(node: yaml.Node | None, key: str) -> int | None:
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if k.value == key:
                return int(k.start_mark.line) + 1
    return None


def load_judge_file(path: str | Path) -> JudgeDefinition:
    """Read and check one judge file; every problem names the file, line and field."""
    path = Path(path)
    src = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError([Problem(src, None, "", f"cannot read judge file: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(src, None, "", f"not UTF-8 text: {exc.reason}")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(
            [Problem(src, mark.line + 1 if mark else None, "", f"bad YAML: {getattr(exc, 'problem', None) or exc}")]
        ) from None
    if not isinstance(data, dict):
        raise ConfigError([Problem(src, 1, "", "expected a mapping with kind, prompt and verdict")])
    problems: list[Problem] = []

    def bad(key: str, msg: str) -> None:
        problems.append(Problem(src, _line_of(node, key.split(".")[0]), key, msg))

    known = {"name", "kind", "description", "system", "prompt", "verdict", "defaults", "params", "tie_margin"}
    for key in data:
        if key not in known:
            bad(str(key), f"unknown key (expected one of: {', '.join(sorted(known))})")
    kind = data.get("kind")
    if kind not in KINDS:
        bad("kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    prompt, system = data.get("prompt"), data.get("system", "")
    if not isinstance(prompt, str) or not prompt.strip():
        bad("prompt", "required: the prompt template (text with {placeholders})")
        prompt = ""
    if not isinstance(system, str):
        bad("system", "expected text")
        system = ""
    verdict = data.get("verdict")
    pattern = None
    vmap: dict[str, str] = {}
    rng: tuple[float, float] = (1.0, 10.0)
    if not isinstance(verdict, dict):
        bad("verdict", "required: a mapping with pattern (regex, first group = the verdict) and map or range")
    else:
        try:
            pattern = re.compile(str(verdict.get("pattern", "")))
            if pattern.groups < 1 or not verdict.get("pattern"):
                bad("verdict.pattern", "needs a regular expression with one capturing group holding the verdict")
        except re.error as exc:
            bad("verdict.pattern", f"not a valid regular expression: {exc}")
        if kind == "pairwise":
            m = verdict.get("map")
            if not isinstance(m, dict) or not m or any(v not in ("a", "b", "tie") for v in m.values()):
                bad("verdict.map", "pairwise judges map each marker to a, b or tie, e.g. {A: a, B: b, TIE: tie}")
            else:
                vmap = {str(k): str(v) for k, v in m.items()}
        elif kind == "single":
            r = verdict.get("range", [1, 10])
            if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, (int, float)) for x in r) and r[0] < r[1]):
                bad("verdict.range", "expected [low, high] numbers, e.g. [1, 10]")
            else:
                rng = (float(r[0]), float(r[1]))
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or any(not isinstance(v, str) for v in defaults.values()):
        bad("defaults", "expected a mapping of placeholder name to text (e.g. rubric: ...)")
        defaults = {}
    params = data.get("params") or {}
    if not isinstance(params, dict):
        bad("params", "expected a mapping of request parameters (temperature, max_tokens, ...)")
        params = {}
    margin = data.get("tie_margin", 0)
    if not isinstance(margin, (int, float)) or margin < 0:
        bad("tie_margin", "expected a number >= 0")
        margin = 0
    if kind in KINDS:
        used = set(PLACEHOLDER.findall(system)) | set(PLACEHOLDER.findall(prompt))
        for name in sorted(used - VARIABLES[kind]):
            bad("prompt", f"unknown placeholder {{{name}}} (a {kind} judge knows: {', '.join(sorted(VARIABLES[kind]))})")
        needed = {"answer_a", "answer_b"} if kind == "pairwise" else {"answer"}
        for name in sorted(needed - used):
            bad("prompt", f"a {kind} judge's prompt must show {{{name}}}")
    if problems:
        raise ConfigError(problems)
    canonical = json.dumps(
        {
            "kind": kind,
            "system": system,
            "prompt": prompt,
            "pattern": verdict["pattern"],  # type: ignore[index]
            "map": vmap,
            "range": rng,
            "defaults": defaults,
            "params": params,
            "tie_margin": margin,
        },
        sort_keys=True,
    )
    return JudgeDefinition(
        name=str(data.get("name") or path.stem),
        kind=str(kind),
        prompt=prompt,
        system=system,
        pattern=pattern,  # type: ignore[arg-type]
        verdict_map=vmap,
        score_range=rng,
        tie_margin=float(margin),
        defaults=dict(defaults),
        params=dict(params),
        description=str(data.get("description", "")),
        path=src,
        content_hash=hashlib.sha256(canonical.encode()).hexdigest()[:16],
    )


def judge_dirs(judges_dir: str | None = None, *, source: str = "config") -> list[Path]:
    """Where judges are looked up, first match wins: `judges_dir` (the config's, read from `source`), ./judges, the built-ins."""
    dirs: list[Path] = []
    if judges_dir:
        d = Path(judges_dir)
        if not d.is_dir():
            raise ConfigError([Problem(source, None, "judges_dir", f"{d} is not a folder")])
        dirs.append(d)
    dirs.append(Path.cwd() / "judges")
    dirs.append(BUILTIN_DIR)
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in {x.resolve() for x in out}:
            out.append(d)
    return out


def load_judges(dirs: Iterable[Path]) -> dict[str, JudgeDefinition]:
    """Every judge file (*.yaml, *.yml) in the folders; a name in an earlier folder shadows later ones."""
    found: dict[str, JudgeDefinition] = {}
    problems: list[Problem] = []
    for d in dirs:
        for f in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
            try:
                j = load_judge_file(f)
            except ConfigError as exc:
                problems.extend(exc.problems)
                continue
            found.setdefault(j.name, j)
    if problems:
        raise ConfigError(problems)
    return found


def validate_judge_checks(cases: Iterable[Case], judges: dict[str, JudgeDefinition]) -> None:
    """Refuse, before any call, cases naming an unknown judge or lacking what their judge shows."""
    problems: list[Problem] = []
    for c in cases:
        spec = c.checks.judge
        if spec is None:
            continue
        where = (c.file or c.id, c.line)
        j = judges.get(spec.mode)
        if j is None:
            problems.append(
                Problem(*where, "checks.judge.mode", f"unknown judge {spec.mode!r} (known: {', '.join(sorted(judges)) or 'none'})")
            )
            continue
        for var in ("reference", "rubric"):
            if var in j.variables and getattr(spec, var) is None and var not in j.defaults:
                problems.append(Problem(*where, f"checks.judge.{var}", f"judge {j.name!r} needs a {var} ({j.path})"))
    if problems:
        raise SuiteError(problems)


# ------------------------------------------------------------------ hardening

_DELIMITER_LOOKALIKE = re.compile(r"<{3,}|>{3,}")
_INJECTION_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "overrides instructions",
        re.compile(
            r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(instructions?|rules|prompts?|guidelines|directions)\b", re.I
        ),
    ),
    ("overrides instructions", re.compile(r"\b(new|updated|real) (system )?instructions?\s*:|\bsystem prompt\b", re.I)),
    ("addresses the judge", re.compile(r"\byou are (now )?(the|a|an) (judge|grader|evaluator|assessor|referee)\b", re.I)),
    ("addresses the judge", re.compile(r"\b(judges?|graders?|evaluators?)\b[^.\n]{0,40}\b(must|should|shall|will|need to)\b", re.I)),
    (
        "dictates a verdict",
        re.compile(r"\b(answer|output|respond|reply|say|write|print|choose|pick|select|declare|return)\b[^\n]{0,40}\[\[", re.I),
    ),
    (
        "dictates a verdict",
        re.compile(
            r"\b(reply|response|answer|assistant) ?(a|b|1|2)\b[^.\n]{0,12}\b(is|was) (better|the (winner|best)|superior|preferred)\b", re.I
        ),
    ),
    (
        "asks for a grade",
        re.compile(
            r"\b(give|rate|score|grade|award)\b[^.\n]{0,30}\b(10|ten|full marks|highest|perfect)\b[^.\n]{0,20}\b(score|grade|rating|marks|points)?",
            re.I,
        ),
    ),
]


def _break_markers(text: str, pattern: re.Pattern[str]) -> str:
    """Make verdict markers inside an answer unreadable to the parser, visibly to the judge."""
    for _ in range(16):
        m = pattern.search(text)
        if m is None:
            return text
        s = m.group(0)
        text = text[: m.start()] + s[:1] + " " + s[1:] + text[m.end() :]
    return pattern.sub("[verdict marker removed]", text)


def neutralise(text: str, judge: JudgeDefinition) -> str:
    """The answer as the judge sees it: no delimiter look-alikes, no parsable verdict markers."""
    text = _DELIMITER_LOOKALIKE.sub(lambda m: ("\u2039" if m.group(0)[0] == "<" else "\u203a") * len(m.group(0)), text)
    return _break_markers(text, judge.pattern)


def injection_signals(text: str, judge: JudgeDefinition) -> list[str]:
    """Why this answer looks like it talks to the judge (empty: it does not)."""
    found = [label for label, rx in _INJECTION_PATTERNS if rx.search(text)]
    if judge.pattern.search(text):
        found.append("contains a verdict marker")
    if _DELIMITER_LOOKALIKE.search(text):
        found.append("contains a delimiter look-alike")
    return list(dict.fromkeys(found))


def _fence(label: str, body: str, nonce: str) -> str:
    return f"<<<{label} {nonce}>>>\n{body}\n<<<end of {label} {nonce}>>>"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


def question_text(case: Case) -> str:
    """The conversation as one readable block (every turn, roles named)."""
    if case.messages is None:
        return case.prompt or ""
    return "\n\n".join(f"[{m.get('role')}]\n{_content_text(m.get('content'))}" for m in case.messages)


def render(judge: JudgeDefinition, inputs: dict[str, str], nonce: str) -> list[dict[str, str]]:
    """The chat messages for one call; inputs are already neutralised, each is fenced with the nonce."""
    labels = {
        "question": "conversation",
        "answer": "reply",
        "answer_a": "reply A",
        "answer_b": "reply B",
        "reference": "reference answer",
        "rubric": "rubric",
    }
    values = {k: _fence(labels[k], v, nonce) for k, v in inputs.items()}
    values["nonce"] = nonce

    def fill(template: str) -> str:
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)

    messages = [{"role": "system", "content": fill(judge.system)}] if judge.system.strip() else []
    messages.append({"role": "user", "content": fill(judge.prompt)})
    return messages


# ------------------------------------------------------------------ cache


class JudgeCache:
    """Judge answers that parsed, keyed by everything that could change them."""

    def __init__(self, path: Path):
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._db.execute("CREATE TABLE IF NOT EXISTS judge_calls (key TEXT PRIMARY KEY, body TEXT NOT NULL, created REAL NOT NULL)")

    @staticmethod
    def key(target: JudgeTarget, judge: JudgeDefinition, inputs: dict[str, str]) -> str:
        ident = {
            "url": target.url,
            "model": target.model,
            "extra_body": target.extra_body,
            "judge": judge.name,
            "template": judge.content_hash,
            "inputs": inputs,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT body FROM judge_calls WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, body: dict[str, Any]) -> None:
        self._db.execute("INSERT OR REPLACE INTO judge_calls VALUES (?,?,?)", (key, json.dumps(body), time.time()))

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM judge_calls").fetchone()[0])

    def close(self) -> None:
        self._db.close()


# ------------------------------------------------------------------ calling


@dataclass
class _Caller:
    """One judge endpoint with its cache, concurrency bound and counters.

    Calls go through the one HTTP layer (`core._http`): non-streaming chat
    completions, retried on the same statuses and faults as generation
    (`run.retries`), errors redacted and worded the same way.
    """

    http: HttpClient
    target: JudgeTarget
    cache: JudgeCache
    retries: int
    sem: asyncio.Semaphore
    calls: int = 0
    cache_hits: int = 0

    async def ask(self, judge: JudgeDefinition, inputs: dict[str, str]) -> dict[str, Any]:
        """One judgement: cached, or asked up to 1 + retries times until it parses."""
        key = JudgeCache.key(self.target, judge, inputs)
        hit = self.cache.get(key)
        if hit is not None:
            self.cache_hits += 1
            return {**hit, "cached": True}
        last = ""
        attempts = 1 + self.retries
        url = self.target.base_url + "/chat/completions"
        for attempt in range(1, attempts + 1):
            body = {
                "model": self.target.model,
                "messages": render(judge, inputs, secrets.token_hex(8)),
                **judge.params,
                **self.target.extra_body,
            }
            async with self.sem:
                self.calls += 1
                out = await self.http.post_json(url, body)
            if out.error is not None:
                return {
                    "error": f"judge endpoint failed: {out.error.kind}: {out.error.message}"[:500],
                    "attempts": attempt,
                    "cached": False,
                }
            last = _answer_text(out.value)
            parsed = judge.parse(last)
            if parsed is not None:
                rec = {"marker": parsed[0], "verdict": parsed[1], "raw": last, "attempts": attempt}
                self.cache.put(key, rec)
                return {**rec, "cached": False}
        return {"error": f"judge answer unparseable after {attempts} attempts", "raw": last, "attempts": attempts, "cached": False}


def _answer_text(body: Any) -> str:
    """The first choice's message content; an answer without one reads as empty (and so unparseable)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


_FROM_CANDIDATE_FIRST = {"a": "win", "b": "loss", "tie": "tie"}
_FROM_BASELINE_FIRST = {"a": "loss", "b": "win", "tie": "tie"}


def _excerpt(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS // 3] + " … " + text[-2 * EXCERPT_CHARS // 3 :]


def _order_detail(order: str, res: dict[str, Any]) -> dict[str, Any]:
    d = {
        "order": order,
        "verdict": res.get("marker"),
        "attempts": res.get("attempts"),
        "cached": res.get("cached", False),
        "excerpt": _excerpt(res.get("raw")),
    }
    if "error" in res:
        d["error"] = res["error"]
    return d


async def _judge_pair(caller: _Caller, judge: JudgeDefinition, case: Case, base: str, cand: str) -> dict[str, Any]:
    """The pair's outcome from the candidate's side: value, error and detail."""
    spec = case.checks.judge
    assert spec is not None
    shared = {"question": question_text(case)}
    for var in ("rubric", "reference"):
        if var in judge.variables:
            shared[var] = getattr(spec, var) or judge.defaults.get(var, "")
    shared = {k: neutralise(v, judge) for k, v in shared.items()}
    b, c = neutralise(base, judge), neutralise(cand, judge)
    signals = {side: s for side, s in (("baseline", injection_signals(base, judge)), ("candidate", injection_signals(cand, judge))) if s}
    detail: dict[str, Any] = {
        "judge": judge.name,
        "kind": judge.kind,
        "identical": False,
        "flagged_injection": bool(signals),
        "injection_signals": signals,
        "position_consistent": None,
        "rubric_scores": None,
        "rubric_delta": None,
    }
    if judge.kind == "pairwise":
        first, second = await asyncio.gather(
            caller.ask(judge, {**shared, "answer_a": b, "answer_b": c}), caller.ask(judge, {**shared, "answer_a": c, "answer_b": b})
        )
        detail["orders"] = [_order_detail("baseline_first", first), _order_detail("candidate_first", second)]
        detail["cached"] = bool(first.get("cached") and second.get("cached"))
        errors = [r["error"] for r in (first, second) if "error" in r]
        if errors:
            return {"value": None, "error": "; ".join(dict.fromkeys(errors)), "detail": detail}
        o1, o2 = _FROM_BASELINE_FIRST[first["verdict"]], _FROM_CANDIDATE_FIRST[second["verdict"]]
        detail["position_consistent"] = o1 == o2
        detail["positions"] = [first["verdict"], second["verdict"]]  # a | b | tie per order: the judge's position bias
        return {"value": o1 if o1 == o2 else "tie", "error": None, "detail": detail}
    rb, rc = await asyncio.gather(caller.ask(judge, {**shared, "answer": b}), caller.ask(judge, {**shared, "answer": c}))
    detail["orders"] = [_order_detail("baseline", rb), _order_detail("candidate", rc)]
    detail["cached"] = bool(rb.get("cached") and rc.get("cached"))
    errors = [r["error"] for r in (rb, rc) if "error" in r]
    if errors:
        return {"value": None, "error": "; ".join(dict.fromkeys(errors)), "detail": detail}
    delta = rc["verdict"] - rb["verdict"]
    detail["rubric_scores"] = {"baseline": rb["verdict"], "candidate": rc["verdict"]}
    detail["rubric_delta"] = delta
    value = "tie" if abs(delta) <= judge.tie_margin else ("win" if delta > 0 else "loss")
    return {"value": value, "error": None, "detail": detail}


def _no_answer(r: Response | None, side: str) -> str | None:
    if r is None:
        return f"no {side} answer stored"
    if r.error is not None:
        return f"no {side} answer ({r.error.kind}: {r.error.message})"[:300]
    return None


def _aa_score(case: Case, repeat: int, outcome: dict[str, Any]) -> Score:
    """The judge on an A/A pair (the baseline against the control, same configuration): stored on the control.

    From the control's side, like the candidate's score: a loss here has no
    change behind it, so the statistics read it as the judge's noise floor
    (`verdict._stats.noise_floor`: a case the control loses is flaky, and
    the loss rate sets how many candidate losses noise alone explains).
    """
    value, err, detail = outcome["value"], outcome["error"], {**outcome["detail"], "aa": True}
    status: ScoreStatus = "error" if err is not None else ("fail" if value == "loss" else "pass")
    if err is not None:
        detail["error"] = err
    return Score(case_id=case.id, target="control", repeat=repeat, check="judge", status=status, value=value, detail=detail)


def _repeat_aa_score(case: Case, repeat: int, outcome: dict[str, Any]) -> Score:
    """Without a control, the baseline's later repeat judged against its first answer: stored as that repeat's baseline score.

    The baseline is the reference side, so its judge score is `pass`,
    except where this A/A judgement says the repeat lost to the baseline's
    own first answer: `fail`. The case then disagrees with itself across
    repeats, which is what the statistics' repeats floor measures (flaky
    case, disagreement count). It replaces the reference score the
    candidate's pair wrote for this repeat (written after it). A failed
    A/A call leaves the reference `pass` and records the error in
    `detail.error` (the A/A figures count it as an A/A error).
    """
    value, err = outcome["value"], outcome["error"]
    detail = {**outcome["detail"], "aa": True, "aa_against_repeat": 0}
    if err is not None:
        detail["error"] = err
    status: ScoreStatus = "fail" if err is None and value == "loss" else "pass"
    return Score(case_id=case.id, target="baseline", repeat=repeat, check="judge", status=status, value=value, detail=detail)


async def _identical(judge: JudgeDefinition) -> dict[str, Any]:
    return {"value": "tie", "error": None, "detail": {"judge": judge.name, "kind": judge.kind, "identical": True}}


def _pair_scores(case: Case, repeat: int, outcome: dict[str, Any]) -> list[Score]:
    value, err, detail = outcome["value"], outcome["error"], outcome["detail"]
    statuses: tuple[ScoreStatus, ScoreStatus]
    if err is not None:
        detail = {**detail, "error": err}
        statuses = ("error", "error")
    else:
        statuses = ("pass", "fail" if value == "loss" else "pass")
    return [
        Score(
            case_id=case.id,
            target=t,
            repeat=repeat,
            check="judge",
            status=s,
            value=value,
            detail=detail,
        )
        for t, s in zip(("baseline", "candidate"), statuses)
    ]


JUDGE_WINDOW = 512
"""Pairs handed to the judge endpoint per batch: concurrency is bounded by `run.concurrency` inside a
batch; the batch bounds how many pairs (answers, pending calls) are held while the run is walked."""


@dataclass
class _JudgeCounts:
    pairs: int = 0
    identical: int = 0
    no_answer: int = 0
    aa_pairs: int = 0
    """A/A pairs (baseline against control, or a later baseline repeat against the first) that diverged and went to the judge."""


def _judged_scores(
    store: RunStore,
    judges: dict[str, JudgeDefinition],
    caller: _Caller,
    runner: asyncio.Runner,
    counts: _JudgeCounts,
    window: int = JUDGE_WINDOW,
    progress: Progress | None = None,
) -> Iterator[Score]:
    """The judge scores of every judged (case, repeat), walked one case at a time and judged a window at a time.

    Only cases that ask for a judge are read (`by_case(judged_only=True)`);
    their pairs are sent in windows of `window`, so neither the cases, the
    answers nor the scores of the whole run are ever held.

    Where the run has a control (`--control`, or the baseline asked again:
    `generation._noise`), the judge also judges the baseline against it:
    an identical A/A pair is a tie without a call, a divergent one is
    judged like any pair and stored on the control (`_aa_score`). Without
    a control, a case's later baseline repeats are judged against its
    first answer (`_repeat_aa_score`).
    """
    batch: list[tuple[Case, int, str, str, str]] = []
    shown = progress or Progress()

    def flush() -> list[Score]:
        if not batch:
            return []
        jobs = list(batch)
        batch.clear()

        async def judged() -> list[Any]:
            return list(
                await asyncio.gather(
                    *(
                        _identical(judges[c.checks.judge.mode]) if b == k else _judge_pair(caller, judges[c.checks.judge.mode], c, b, k)
                        for c, _, b, k, _ in jobs
                    )
                )
            )

        outcomes = runner.run(judged())
        out: list[Score] = []
        for (case, rep, _, _, side), res in zip(jobs, outcomes, strict=True):
            if side == "candidate":
                out.extend(_pair_scores(case, rep, res))
            else:
                out.append(_aa_score(case, rep, res) if side == "control" else _repeat_aa_score(case, rep, res))
        return out

    for rec in store.by_case(scores=False, judged_only=True):
        shown.advance("judge", True)  # the case's pairs are queued: the calls of a window follow
        case = rec.case
        judge = judges[case.checks.judge.mode]
        pairs: dict[int, dict[str, Response]] = {}
        for r in rec.responses:
            pairs.setdefault(r.repeat, {})[r.target] = r
        if case.sampled:
            # The judge weighs the candidate's answer against the baseline's, which always scores `pass`: between
            # two samples of one distribution that is one-sided, and would fail a faithful candidate. Its other
            # checks' pass rates are compared instead, as for the identity checks.
            reason = {"judge": judge.name, "kind": judge.kind, "reason": NOT_FOR_SAMPLED}
            for rep in sorted(pairs):
                for t in ("baseline", "candidate"):
                    if t in pairs[rep]:
                        yield Score(case_id=case.id, target=t, repeat=rep, check="judge", status="skipped", detail=reason)
            continue
        has_control = any(r.target == "control" for r in rec.responses)
        first = pairs.get(0, {}).get("baseline")  # without a control, the A/A reference of the later repeats
        for rep, pair in sorted(pairs.items()):
            b, c, k = pair.get("baseline"), pair.get("candidate"), pair.get("control")
            missing = _no_answer(b, "baseline") or _no_answer(c, "candidate")
            base_detail = {"judge": judge.name, "kind": judge.kind}
            counts.pairs += 1
            if b is not None and b.ok and k is not None and k.ok:
                if b.answer == k.answer:
                    yield _aa_score(case, rep, {"value": "tie", "error": None, "detail": {**base_detail, "identical": True}})
                else:
                    counts.aa_pairs += 1
                    batch.append((case, rep, b.answer, k.answer, "control"))
                    if len(batch) >= window:
                        yield from flush()
            if missing:
                counts.no_answer += 1
                yield from (
                    Score(
                        case_id=case.id,
                        target=t,
                        repeat=rep,
                        check="judge",
                        status="error",
                        detail={**base_detail, "no_answer": True, "error": missing},
                    )
                    for t in ("baseline", "candidate")
                )
            elif b.answer == c.answer:  # type: ignore[union-attr]
                counts.identical += 1
                yield from _pair_scores(
                    case,
                    rep,
                    {
                        "value": "tie",
                        "error": None,
                        "detail": {
                            **base_detail,
                            "identical": True,
                            "cached": False,
                            "flagged_injection": False,
                            "injection_signals": {},
                            "position_consistent": None,
                            "rubric_scores": None,
                            "rubric_delta": 0 if judge.kind == "single" else None,
                        },
                    },
                )
            else:
                batch.append((case, rep, b.answer, c.answer, "candidate"))  # type: ignore[union-attr]
                if len(batch) >= window:
                    yield from flush()
            if not has_control and rep > 0 and first is not None and first.ok and b is not None and b.ok:
                # Queued after this repeat's pair, so its score replaces the reference score written above.
                counts.aa_pairs += b.answer != first.answer
                batch.append((case, rep, first.answer, b.answer, "repeat"))
                if len(batch) >= window:
                    yield from flush()
    yield from flush()


def _judge_run(
    store: RunStore,
    target: JudgeTarget,
    opts: JudgeOptions,
    judges: dict[str, JudgeDefinition],
    http_client: aiohttp.ClientSession | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Judge the run a window at a time on one event loop, streaming the scores into the store."""
    from qualitycheck.core._http import HttpClient

    counts = _JudgeCounts()
    with asyncio.Runner() as runner:

        async def open_caller() -> _Caller:  # the semaphore and the session belong to the runner's loop
            http = HttpClient(target, opts.http, session=http_client)
            cache = JudgeCache(store.folder / CACHE_NAME)
            return _Caller(http, target, cache, opts.answer_retries, asyncio.Semaphore(opts.http.concurrency))

        caller = runner.run(open_caller())
        try:
            store.replace_scores(_judged_scores(store, judges, caller, runner, counts, JUDGE_WINDOW, progress), checks=["judge"])
        finally:
            runner.run(caller.http.aclose())
            caller.cache.close()
    return {
        "url": target.url,
        "model": target.model,
        "calls": caller.calls,
        "cache_hits": caller.cache_hits,
        "pairs": counts.pairs,
        "skipped_identical": counts.identical,
        "no_answer": counts.no_answer,
        "aa_pairs": counts.aa_pairs,
        "judges": {j.name: {"hash": j.content_hash, "path": j.path} for j in judges.values()},
    }


def _not_configured(store: RunStore, judged: int) -> dict[str, Any]:
    """Cases ask for a judge but none is configured: say so, and record `skipped`, never a pass."""
    import sys

    reason = "no judge endpoint configured (--judge URL --judge-model NAME, or `judge:` in the config)"
    scores = (
        Score(
            case_id=r.case_id,
            target=r.target,
            repeat=r.repeat,
            check="judge",
            status="skipped",
            detail={"not_configured": True, "error": reason},
        )
        for rec in store.by_case(scores=False, judged_only=True)
        for r in rec.responses
        if r.target in ("baseline", "candidate")
    )
    store.replace_scores(scores, checks=["judge"])
    print(f"qualitycheck: warning: {judged} case(s) ask for a judge but {reason}; their judge check is not evaluated", file=sys.stderr)
    return {"calls": 0, "cache_hits": 0, "pairs": 0, "not_configured": judged}


def score_judge(
    store: RunStore,
    judge: JudgeTarget | None,
    opts: JudgeOptions | None = None,
    *,
    http_client: aiohttp.ClientSession | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Judge every divergent pair of the run with `judge` and replace the store's `judge` scores.

    Returns what the stage did (calls sent, cache hits, pairs); it is also
    stored as the `judge_stage` artifact. Without cases asking for a judge
    nothing is called or replaced; without a judge target their judge scores
    are `skipped` (with a warning), so the check reads "not evaluated".
    The stage streams: the judged cases are read one at a time (first to
    check them, then to judge them) and their scores go to the store as
    they are made.
    """
    judged = store.judged_case_count()
    if not judged:
        return {"calls": 0, "cache_hits": 0, "pairs": 0}
    if judge is None:
        return _not_configured(store, judged)
    opts = opts or JudgeOptions()
    judges = load_judges(judge_dirs(opts.judges_dir, source=opts.source))
    validate_judge_checks(store.iter_cases(judged_only=True), judges)  # before any call
    t0 = time.monotonic()
    shown = progress or Progress()
    shown.start({"judge": judged})
    try:
        stage = _judge_run(store, judge, opts, judges, http_client, shown)
    finally:
        shown.stop()
    stage["wall_s"] = round(time.monotonic() - t0, 3)
    store.put_artifact("judge_stage", stage)
    return stage
