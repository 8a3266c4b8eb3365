"""Preflight: prove both servers would see the same thing before blaming the drafter.

A quality difference between baseline and candidate means something only if
both serve the same model with the same tokenizer, chat template, stop
tokens and generation defaults. Each check below asks both servers the same
question and compares the answers; a check that a server cannot answer
(endpoint missing, not vLLM) is recorded as not checked (`passed: None`),
never as passed. `/tokenize` of every case's messages is the sharpest one:
it applies the chat template server-side, so template or system-prompt drift
shows up as different token ids.

llama.cpp's llama-server answers other questions: `/props` (chat template,
bos/eos tokens, model file and type, context size per slot, default
sampling settings) instead of vLLM's `/tokenizer_info` and `/server_info`,
and its `/tokenize` takes text, not messages, so a chat case is rendered by
its `/apply-template` first (the template the server applies to a chat
request) and that text tokenized with special tokens parsed. A server that
answers `/props` with those fields is asked this way.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import aiohttp

from qualitycheck.core._cases import Case
from qualitycheck.core._config import HttpPolicy, RunOptions, Target
from qualitycheck.core._http import HttpClient, Outcome, shared_session
from qualitycheck.core._records import PreflightCheckRecord, PreflightRecord

__all__ = ["Check", "PreflightResult", "check_served_models", "format_preflight", "preflight", "preflight_http", "run_preflight"]

_TOKENIZER_KEYS = (
    "tokenizer_class",
    "eos_token",
    "bos_token",
    "pad_token",
    "unk_token",
    "add_bos_token",
    "add_eos_token",
    "chat_template",
    "model_max_length",
)
_MODEL_CONFIG_KEYS = ("generation_config", "override_generation_config", "dtype", "tokenizer", "tokenizer_mode", "max_model_len", "seed")


@dataclass
class Check:
    """One comparison; `passed` None means it could not be made."""

    name: str
    passed: bool | None
    detail: str
    baseline: Any = None
    candidate: Any = None


@dataclass
class PreflightResult:
    baseline: str
    candidate: str
    model: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (checks that could not be made do not fail it)."""
        return not any(c.passed is False for c in self.checks)

    @property
    def mismatches(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def to_record(self) -> PreflightRecord:
        """The record generation stores for the gate and the summary (`RunStore.put_record`)."""
        return PreflightRecord(
            ok=self.ok,
            baseline=self.baseline,
            candidate=self.candidate,
            model=self.model,
            checks=[PreflightCheckRecord(**asdict(c)) for c in self.checks],
            mismatches=[c.name for c in self.mismatches],
        )

    def to_dict(self) -> dict[str, Any]:
        """`qualitycheck preflight --json`: the record's fields, without the store's format version."""
        return self.to_record().model_dump(mode="json", exclude={"format_version"})


class _Server:
    """GET/POST through the HTTP layer; every failure becomes (None, "<url>: <the error's message>")."""

    def __init__(self, http: HttpClient):
        self.t = http.target
        self.http = http
        self.llama_props: dict[str, Any] | None = None
        """llama-server's /props answer, once `_props_check` found one: how this server is asked to tokenize."""

    async def get(self, path: str, root: bool = True) -> tuple[Any, str | None]:
        url = (self.t.server_url if root else self.t.base_url) + path
        return _result(url, await self.http.get_json(url))

    async def post(self, path: str, body: dict[str, Any]) -> tuple[Any, str | None]:
        url = self.t.server_url + path
        return _result(url, await self.http.post_json(url, body))


def _result(url: str, out: Outcome[Any]) -> tuple[Any, str | None]:
    return (out.value, None) if out.error is None else (None, f"{url}: {out.error.message}")


def _served_ids(data: Any) -> list[str] | None:
    """The model ids a /v1/models answer lists, or None when the answer is not such a list."""
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return [str(m["id"]) for m in entries if isinstance(m, dict) and "id" in m]


async def _unserved(targets: dict[str, Target], timeout_s: float) -> list[tuple[str, Target, list[str]]]:
    policy = HttpPolicy(timeout_s=timeout_s, retries=1, backoff_s=0.2)
    async with shared_session(None, 8, timeout_s) as session:
        servers = {name: _Server(HttpClient(t, policy, session=session)) for name, t in targets.items()}
        answers = await asyncio.gather(*(s.get("/models", root=False) for s in servers.values()))
    out = []
    for (name, t), (data, err) in zip(targets.items(), answers, strict=True):
        ids = None if err else _served_ids(data)
        if ids and t.model not in ids:
            out.append((name, t, ids))
    return out


def check_served_models(targets: dict[str, Target], *, source: str, timeout_s: float = 10.0) -> None:
    """Refuse a run whose model name a target does not serve, before any case is sent (exit 2).

    A target whose /v1/models cannot be read is not refused here: some
    gateways do not expose it, and a target that then refuses every request
    stops the run within its first answers anyway (the runner's fail-fast).
    """
    from qualitycheck.core._errors import ConfigError, Problem

    wrong = asyncio.run(_unserved(targets, timeout_s))
    if wrong:
        raise ConfigError(
            [
                Problem(source, None, f"{name}.model", f"{t.public_url} does not serve {t.model!r}; it serves {', '.join(map(repr, ids))}")
                for name, t, ids in wrong
            ]
        )


async def _model_check(b: _Server, c: _Server) -> list[Check]:
    (mb, eb), (mc, ec) = await asyncio.gather(b.get("/models", root=False), c.get("/models", root=False))
    entries = {}
    for side, data, err, srv in (("baseline", mb, eb, b), ("candidate", mc, ec, c)):
        if err:
            return [Check("served_model", None, f"{side}: {err}")]
        found = [m for m in (data or {}).get("data", []) if m.get("id") == srv.t.model]
        if not found:
            ids = [m.get("id") for m in (data or {}).get("data", [])]
            return [Check("served_model", False, f"{side} does not serve {srv.t.model!r} (serves {ids})")]
        entries[side] = found[0]
    checks = [
        Check(
            "served_model",
            True,
            f"both serve {b.t.model!r}" if b.t.model == c.t.model else f"baseline {b.t.model!r}, candidate {c.t.model!r}",
        )
    ]
    for key in ("root", "max_model_len"):
        vb, vc = entries["baseline"].get(key), entries["candidate"].get(key)
        if vb is None and vc is None:
            checks.append(Check(f"model_{key}", None, f"/v1/models shows no {key}"))
        else:
            same = vb == vc
            checks.append(
                Check(f"model_{key}", same, f"{key}: {vb!r}" if same else f"{key} differs: baseline {vb!r}, candidate {vc!r}", vb, vc)
            )
    return checks


async def _version_check(b: _Server, c: _Server) -> Check:
    (vb, eb), (vc, ec) = await asyncio.gather(b.get("/version"), c.get("/version"))
    if eb or ec:
        return Check("engine_version", None, f"version not exposed: {eb or ec}")
    vb, vc = (vb or {}).get("version"), (vc or {}).get("version")
    same = vb == vc
    return Check(
        "engine_version", same, f"both {vb}" if same else f"engine differs: baseline {vb}, candidate {vc} (numerics may differ)", vb, vc
    )


async def _dict_check(b: _Server, c: _Server, name: str, path: str, pick: Any) -> Check:
    (db, eb), (dc, ec) = await asyncio.gather(b.get(path), c.get(path))
    if eb or ec:
        return Check(name, None, f"not exposed ({eb or ec})")
    pb, pc = pick(db or {}), pick(dc or {})
    keys = sorted(set(pb) | set(pc))
    if not keys:
        return Check(name, None, f"{path} shows none of the compared fields")
    diff = [k for k in keys if pb.get(k) != pc.get(k)]
    if not diff:
        return Check(name, True, f"identical: {', '.join(keys)}")
    parts = [f"{k}: baseline {_short(pb.get(k))}, candidate {_short(pc.get(k))}" for k in diff]
    return Check(name, False, "; ".join(parts), {k: pb.get(k) for k in diff}, {k: pc.get(k) for k in diff})


def _short(v: Any) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 80 else s[:77] + "..."


def _model_config(d: dict[str, Any]) -> dict[str, Any]:
    cfg = d.get("vllm_config")
    mc = cfg.get("model_config") if isinstance(cfg, dict) else None
    return {k: mc[k] for k in _MODEL_CONFIG_KEYS if isinstance(mc, dict) and k in mc}


_LLAMA_PROPS = ("chat_template", "chat_template_tool_use", "bos_token", "eos_token", "model_ftype")


def _is_llama_props(d: Any) -> bool:
    return isinstance(d, dict) and "default_generation_settings" in d and "chat_template" in d


def _llama_props(d: dict[str, Any]) -> dict[str, Any]:
    """What must match between two llama-servers: template, special tokens, model file, context per slot, sampling defaults.

    The defaults drop the `speculative.*` settings: a candidate drafts by
    design, and a draft's settings change speed, not what is sampled.
    """
    out = {k: d[k] for k in _LLAMA_PROPS if k in d}
    if isinstance(d.get("model_path"), str):  # the file, not where each host mounts it
        out["model_file"] = d["model_path"].replace("\\", "/").rsplit("/", 1)[-1]
    gen = d.get("default_generation_settings")
    if isinstance(gen, dict):
        if "n_ctx" in gen:
            out["n_ctx"] = gen["n_ctx"]
        params = gen.get("params")
        if isinstance(params, dict):
            out["sampling_defaults"] = {k: v for k, v in sorted(params.items()) if not k.startswith("speculative")}
    return out


async def _props_check(b: _Server, c: _Server) -> Check | None:
    """llama-server's /props compared; None when neither side is a llama-server (vLLM has no /props)."""
    (db, eb), (dc, ec) = await asyncio.gather(b.get("/props"), c.get("/props"))
    llama_b, llama_c = _is_llama_props(db), _is_llama_props(dc)
    if llama_b:
        b.llama_props = db
    if llama_c:
        c.llama_props = dc
    if not llama_b and not llama_c:
        return None
    if not (llama_b and llama_c):
        other = "candidate" if llama_b else "baseline"
        return Check(
            "server_props", None, f"only one side is a llama-server; the {other} has no llama.cpp /props ({eb or ec or 'other fields'})"
        )
    pb, pc = _llama_props(db), _llama_props(dc)
    keys = sorted(set(pb) | set(pc))
    diff = [k for k in keys if pb.get(k) != pc.get(k)]
    if not diff:
        return Check("server_props", True, f"identical: {', '.join(keys)}")
    parts = [f"{k}: baseline {_short(pb.get(k))}, candidate {_short(pc.get(k))}" for k in diff]
    return Check("server_props", False, "; ".join(parts), {k: pb.get(k) for k in diff}, {k: pc.get(k) for k in diff})


async def _tokens(srv: _Server, case: Case) -> tuple[Any, str | None]:
    """The server's token ids for a case's input (its /tokenize answer, or the error)."""
    if srv.llama_props is None:
        return await srv.post("/tokenize", case.tokenize_body(srv.t.model, srv.t.extra_body))
    if case.is_chat:
        body = {k: v for k, v in case.tokenize_body(srv.t.model, srv.t.extra_body).items() if k != "model"}
        rendered, err = await srv.post("/apply-template", body)
        if err:
            return None, err
        prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            return None, f"{srv.t.server_url}/apply-template answered no prompt text"
        return await srv.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
    return await srv.post("/tokenize", {"content": case.prompt, "add_special": True, "parse_special": True})


async def _tokenize_check(b: _Server, c: _Server, cases: Iterable[Case], concurrency: int) -> Check:
    """Same token ids for every distinct input; lists the first few cases that differ.

    Streams the cases: each new input is tokenized as it is met, at most
    `concurrency` at a time. What stays is a 16-byte digest per distinct
    input, and the case ids of inputs still being tokenized or found to
    differ (the ones the check names), so a 100,000-case suite is never held.
    """
    seen: set[bytes] = set()
    pending: dict[bytes, tuple[int, list[str]]] = {}  # digest → (order of first appearance, cases sharing it)
    differing: dict[bytes, tuple[int, dict[str, Any]]] = {}
    first_error: tuple[int, str] | None = None
    n_errors = 0
    window = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()

    async def one(key: bytes, case: Case) -> None:
        nonlocal first_error, n_errors
        try:
            try:
                (rb, eb), (rc, ec) = await asyncio.gather(_tokens(b, case), _tokens(c, case))
            finally:
                window.release()
            shaped = all(isinstance(r, dict) or r is None for r in (rb, rc))
            tb = rb.get("tokens") if isinstance(rb, dict) else None
            tc = rc.get("tokens") if isinstance(rc, dict) else None
            err = eb or ec or (None if shaped else "/tokenize answered something other than a JSON object")
        except Exception as exc:  # this input's error: a finished task's exception would otherwise go unseen
            tb = tc = None
            err = f"{type(exc).__name__}: {exc}"
        order, users = pending.pop(key)
        if err or not tb or not tc:
            # an empty list is no answer: llama-server's /tokenize returns [] for a body it does not read
            n_errors += 1
            if first_error is None or order < first_error[0]:
                first_error = (order, f"{case.id}: {err or 'no tokens in answer'}")
        elif tb != tc:
            first = next((i for i, (x, y) in enumerate(zip(tb, tc, strict=False)) if x != y), min(len(tb), len(tc)))
            differing[key] = (order, {"cases": users, "baseline_count": len(tb), "candidate_count": len(tc), "first_difference": first})

    n = 0
    try:
        for case in cases:
            n += 1
            key = hashlib.sha256(json.dumps(case.tokenize_body("", b.t.extra_body), sort_keys=True, default=str).encode()).digest()[:16]
            if key in pending:
                pending[key][1].append(case.id)
            elif key in differing:
                differing[key][1]["cases"].append(case.id)
            elif key not in seen:
                seen.add(key)
                pending[key] = (len(seen), [case.id])
                await window.acquire()
                task = asyncio.create_task(one(key, case))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    distinct = len(seen)
    found = [d for _, d in sorted(differing.values(), key=lambda x: x[0])]
    error = first_error[1] if first_error else ""
    if n_errors and not found and n_errors == distinct:
        return Check("tokenize", None, f"/tokenize not usable: {error}")
    if found:
        n_ids = sum(len(d["cases"]) for d in found)
        shown = ", ".join(
            f"{d['cases'][0]} (token {d['first_difference']}: {d['baseline_count']} vs {d['candidate_count']} tokens)" for d in found[:5]
        )
        more = f" and {len(found) - 5} more inputs" if len(found) > 5 else ""
        return Check(
            "tokenize",
            False,
            f"{n_ids}/{n} cases tokenize differently (chat template, system prompt or tokenizer drift): {shown}{more}",
            candidate={"differing": found},
        )
    if n_errors:
        return Check("tokenize", None, f"{n_errors}/{distinct} inputs could not be tokenized: {error}")
    return Check("tokenize", True, f"identical token ids for all {n} cases ({distinct} distinct inputs)")


PREFLIGHT_TIMEOUT_S = 30.0
"""The longest a preflight call may take, whatever the run's timeout: a check must not stall the run behind it."""
PREFLIGHT_HTTP = HttpPolicy(timeout_s=PREFLIGHT_TIMEOUT_S, retries=RunOptions().retries, backoff_s=RunOptions().backoff_s, concurrency=8)
"""The preflight's calls outside a run (`preflight_http` makes a run's)."""


async def preflight(
    baseline: Target,
    candidate: Target,
    cases: Iterable[Case],
    *,
    http: HttpPolicy = PREFLIGHT_HTTP,
    session: aiohttp.ClientSession | None = None,
) -> PreflightResult:
    """Every check, both servers asked the same questions at the same time (`http.concurrency` /tokenize calls at once).

    Calls are retried and their errors read like generation's (`core._http`);
    `session` may be shared with other callers, otherwise one is opened here.
    """
    concurrency, timeout_s = http.concurrency, http.timeout_s
    result = PreflightResult(
        baseline.url, candidate.url, baseline.model if baseline.model == candidate.model else f"{baseline.model} / {candidate.model}"
    )
    async with shared_session(session, 2 * concurrency + 8, timeout_s) as shared:
        b, c = (_Server(HttpClient(t, http, session=shared)) for t in (baseline, candidate))
        props = await _props_check(b, c)  # first: it decides how each server is asked to tokenize
        models, version, tok_info, server_info, tokenize = await asyncio.gather(
            _model_check(b, c),
            _version_check(b, c),
            _dict_check(b, c, "tokenizer_and_stop_tokens", "/tokenizer_info", lambda d: {k: d[k] for k in _TOKENIZER_KEYS if k in d}),
            _dict_check(b, c, "generation_defaults", "/server_info?config_format=json", _model_config),
            _tokenize_check(b, c, cases, concurrency),
        )
    result.checks = [*models, tokenize, *([props] if props else []), tok_info, server_info, version]
    return result


def run_preflight(baseline: Target, candidate: Target, cases: Iterable[Case], *, http: HttpPolicy = PREFLIGHT_HTTP) -> PreflightResult:
    return asyncio.run(preflight(baseline, candidate, cases, http=http))


def preflight_http(opts: RunOptions) -> HttpPolicy:
    """The preflight's calls in a run: the run's policy, its timeout capped at `PREFLIGHT_TIMEOUT_S`."""
    return replace(opts.http, timeout_s=min(opts.timeout_s, PREFLIGHT_TIMEOUT_S))


def format_preflight(result: PreflightResult) -> str:
    """Human-readable lines: one per check, mismatches first-class."""
    mark = {True: "ok  ", False: "FAIL", None: "n/a "}
    lines = [f"preflight {result.baseline} vs {result.candidate} ({result.model}):"]
    for ch in result.checks:
        lines.append(f"  {mark[ch.passed]} {ch.name}: {ch.detail}")
    if mismatches := [c.name for c in result.mismatches]:
        lines.append(f"{len(mismatches)} mismatch(es): {', '.join(mismatches)}")
    else:
        lines.append("all checks that the servers expose match")
    return "\n".join(lines)
