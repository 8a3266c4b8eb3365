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
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import aiohttp

from qualitycheck.core._cases import Case
from qualitycheck.core._config import HttpPolicy, RunOptions, Target
from qualitycheck.core._http import HttpClient, Outcome, shared_session
from qualitycheck.core._records import PreflightCheckRecord, PreflightRecord, ProfileAnswer, ServerProfile

__all__ = [
    "ESSENTIAL_CHECKS",
    "IDENTITY_CHECKS",
    "SIDES",
    "Check",
    "PreflightResult",
    "check_against_profile",
    "check_served_models",
    "compare_profiles",
    "format_preflight",
    "identity_problems",
    "input_key",
    "preflight",
    "preflight_http",
    "run_preflight",
]

SIDES = ("baseline", "candidate")
"""The two sides a preflight compares, in the order checks name them."""
ESSENTIAL_CHECKS = ("served_model", "tokenize")
"""Without these two answers preflight proved nothing: it cannot say 'all match'."""
IDENTITY_CHECKS = ("served_model", "model_root", "tokenize", "tokenizer_and_stop_tokens", "server_props")
"""What makes two servers the same model fed the same prompt: served model, weights, tokenizer, chat template. A server
checked against a stored one is refused when any of these differs (`identity_problems`); the others are gated as in a
live run (`preflight_consistent`)."""

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
    profiles: list[ServerProfile] = field(default_factory=list)
    """What each side answered (baseline, candidate), as asked now or as stored: `to_record` keeps them."""

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
            profiles=dict(zip(SIDES, self.profiles, strict=False)),
        )

    def to_dict(self) -> dict[str, Any]:
        """`qualitycheck preflight --json`: the record's fields, without the store's format version and the profiles' digests."""
        return self.to_record().model_dump(mode="json", exclude={"format_version", "profiles"})


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


async def _ask_models(srv: _Server) -> ProfileAnswer:
    """/v1/models: the entry of the model asked for, or the ids served when it is not among them."""
    data, err = await srv.get("/models", root=False)
    if err:
        return ProfileAnswer(error=err)
    entries = data.get("data") if isinstance(data, dict) else None
    entries = [m for m in entries if isinstance(m, dict)] if isinstance(entries, list) else []
    found = next((m for m in entries if m.get("id") == srv.t.model), None)
    if found is None:
        return ProfileAnswer(value={"served": [m.get("id") for m in entries]})
    return ProfileAnswer(value={"id": found.get("id"), "root": found.get("root"), "max_model_len": found.get("max_model_len")})


async def _ask_version(srv: _Server) -> ProfileAnswer:
    data, err = await srv.get("/version")
    return ProfileAnswer(error=err) if err else ProfileAnswer(value=(data or {}).get("version") if isinstance(data, dict) else None)


async def _ask_dict(srv: _Server, path: str, pick: Any) -> ProfileAnswer:
    data, err = await srv.get(path)
    return ProfileAnswer(error=err) if err else ProfileAnswer(value=pick(data if isinstance(data, dict) else {}))


async def _ask_props(srv: _Server) -> ProfileAnswer:
    """llama-server's /props, picked as compared; no value (and the error, if any) when the server is not a llama-server."""
    data, err = await srv.get("/props")
    if _is_llama_props(data):
        srv.llama_props = data
        return ProfileAnswer(value=_llama_props(data))
    return ProfileAnswer(error=err)


def _model_checks(b: ProfileAnswer, c: ProfileAnswer, models: tuple[str, str], names: tuple[str, str]) -> list[Check]:
    """served_model, then the served entries' root and max_model_len compared."""
    for name, ans, model in ((names[0], b, models[0]), (names[1], c, models[1])):
        if ans.error or not isinstance(ans.value, dict):
            return [Check("served_model", None, f"{name}: {ans.error or '/v1/models was not read'}")]
        if "served" in ans.value:
            return [Check("served_model", False, f"{name} does not serve {model!r} (serves {ans.value['served']})")]
    checks = [
        Check(
            "served_model",
            True,
            f"both serve {models[0]!r}" if models[0] == models[1] else f"{names[0]} {models[0]!r}, {names[1]} {models[1]!r}",
        )
    ]
    for key in ("root", "max_model_len"):
        vb, vc = b.value.get(key), c.value.get(key)
        if vb is None and vc is None:
            checks.append(Check(f"model_{key}", None, f"/v1/models shows no {key}"))
        else:
            same = vb == vc
            detail = f"{key}: {vb!r}" if same else f"{key} differs: {names[0]} {vb!r}, {names[1]} {vc!r}"
            checks.append(Check(f"model_{key}", same, detail, vb, vc))
    return checks


def _version_check(b: ProfileAnswer, c: ProfileAnswer, names: tuple[str, str]) -> Check:
    if b.error or c.error:
        return Check("engine_version", None, f"version not exposed: {b.error or c.error}")
    vb, vc = b.value, c.value
    same = vb == vc
    detail = f"both {vb}" if same else f"engine differs: {names[0]} {vb}, {names[1]} {vc} (numerics may differ)"
    return Check("engine_version", same, detail, vb, vc)


def _dict_check(name: str, path: str, b: ProfileAnswer, c: ProfileAnswer, names: tuple[str, str]) -> Check:
    if b.error or c.error:
        return Check(name, None, f"not exposed ({b.error or c.error})")
    pb, pc = b.value or {}, c.value or {}
    keys = sorted(set(pb) | set(pc))
    if not keys:
        return Check(name, None, f"{path} shows none of the compared fields")
    return _fields_check(name, pb, pc, keys, names)


def _fields_check(name: str, pb: dict[str, Any], pc: dict[str, Any], keys: list[str], names: tuple[str, str]) -> Check:
    diff = [k for k in keys if pb.get(k) != pc.get(k)]
    if not diff:
        return Check(name, True, f"identical: {', '.join(keys)}")
    parts = [f"{k}: {names[0]} {_short(pb.get(k))}, {names[1]} {_short(pc.get(k))}" for k in diff]
    return Check(name, False, "; ".join(parts), {k: pb.get(k) for k in diff}, {k: pc.get(k) for k in diff})


def _short(v: Any) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 80 else s[:77] + "..."


def _model_config(d: dict[str, Any]) -> dict[str, Any]:
    cfg = d.get("vllm_config")
    mc = cfg.get("model_config") if isinstance(cfg, dict) else None
    return {k: mc[k] for k in _MODEL_CONFIG_KEYS if isinstance(mc, dict) and k in mc}


def _tokenizer_fields(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in _TOKENIZER_KEYS if k in d}


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


def _props_check(b: ProfileAnswer, c: ProfileAnswer, names: tuple[str, str]) -> Check | None:
    """llama-server's /props compared; None when neither side is a llama-server (vLLM has no /props)."""
    llama_b, llama_c = b.value is not None, c.value is not None
    if not llama_b and not llama_c:
        return None
    if not (llama_b and llama_c):
        other = names[1] if llama_b else names[0]
        reason = b.error or c.error or "other fields"
        return Check("server_props", None, f"only one side is a llama-server; the {other} has no llama.cpp /props ({reason})")
    pb, pc = b.value, c.value
    return _fields_check("server_props", pb, pc, sorted(set(pb) | set(pc)), names)


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


def _token_digest(ids: list[int]) -> tuple[int, str]:
    """What a profile keeps of an input's token ids: their count, and a digest that differs when any id does."""
    return len(ids), hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


async def _side_tokens(side: _Server | ServerProfile, case: Case, key: str) -> tuple[list[int] | tuple[int, str] | None, str | None]:
    """One side's tokens for an input: the ids a live server answers, or the (count, digest) a stored profile kept."""
    if isinstance(side, ServerProfile):
        kept = side.tokens.get(key)
        if kept is None:
            why = side.token_error or "its server could not tokenize it"
            return None, f"{side.url}: no token ids stored for this input ({why})"
        return kept, None
    r, err = await _tokens(side, case)
    if err:
        return None, err
    if not (isinstance(r, dict) or r is None):
        return None, "/tokenize answered something other than a JSON object"
    toks = r.get("tokens") if isinstance(r, dict) else None
    if not toks or not isinstance(toks, list):  # llama-server's /tokenize returns [] for a body it does not read
        return None, None
    return toks, None


@dataclass
class _Tokens:
    """One side's tokenized inputs, as a profile keeps them."""

    kept: dict[str, tuple[int, str]] = field(default_factory=dict)
    errors: int = 0
    first_error: str = ""


def input_key(case: Case, extra_body: dict[str, Any]) -> str:
    """The key a case's input is tokenized and kept under: a digest of its `/tokenize` body under the baseline's `extra_body`
    (cases with the same input share it)."""
    return hashlib.sha256(json.dumps(case.tokenize_body("", extra_body), sort_keys=True, default=str).encode()).hexdigest()[:16]


async def _tokenize_check(
    b: _Server | ServerProfile,
    c: _Server | ServerProfile,
    cases: Iterable[Case],
    concurrency: int,
    names: tuple[str, str],
    key_extra: dict[str, Any],
) -> tuple[Check, tuple[_Tokens, _Tokens]]:
    """Same token ids for every distinct input; lists the first few cases that differ. Each side is a server asked now
    or a stored profile: two servers' ids are compared whole (the first differing token named), a stored profile's by
    count and digest.

    Streams the cases: each new input is tokenized as it is met, at most
    `concurrency` at a time. What stays is a 16-byte digest per distinct
    input and what each side's profile keeps of it, and the case ids of
    inputs still being tokenized or found to differ (the ones the check
    names), so a 100,000-case suite is never held.
    """
    seen: set[str] = set()
    pending: dict[str, tuple[int, list[str]]] = {}  # input key → (order of first appearance, cases sharing it)
    differing: dict[str, tuple[int, dict[str, Any]]] = {}
    first_error: tuple[int, str] | None = None
    n_errors = 0
    sides = (_Tokens(), _Tokens())
    window = asyncio.Semaphore(concurrency)
    tasks: set[asyncio.Task[None]] = set()

    async def one(key: str, case: Case) -> None:
        nonlocal first_error, n_errors
        answers: Sequence[tuple[list[int] | tuple[int, str] | None, str | None]]
        try:
            try:
                answers = await asyncio.gather(_side_tokens(b, case, key), _side_tokens(c, case, key))
            finally:
                window.release()
        except Exception as exc:  # this input's error: a finished task's exception would otherwise go unseen
            answers = [(None, f"{type(exc).__name__}: {exc}")] * 2
        got: list[tuple[int, str] | None] = []
        for tally, (toks, err) in zip(sides, answers, strict=True):
            if toks is None:
                tally.errors += 1
                tally.first_error = tally.first_error or f"{case.id}: {err or 'no tokens in answer'}"
                got.append(None)
            else:
                kept = toks if isinstance(toks, tuple) else _token_digest(toks)
                tally.kept[key] = kept
                got.append(kept)
        order, users = pending.pop(key)
        (tb, eb), (tc, ec) = answers
        if got[0] is None or got[1] is None:
            n_errors += 1
            if first_error is None or order < first_error[0]:
                first_error = (order, f"{case.id}: {eb or ec or 'no tokens in answer'}")
        elif got[0] != got[1]:
            found: dict[str, Any] = {"cases": users, "baseline_count": got[0][0], "candidate_count": got[1][0]}
            if isinstance(tb, list) and isinstance(tc, list):
                found["first_difference"] = next((i for i, (x, y) in enumerate(zip(tb, tc, strict=False)) if x != y), min(len(tb), len(tc)))
            differing[key] = (order, found)

    n = 0
    try:
        for case in cases:
            n += 1
            key = input_key(case, key_extra)
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
        return Check("tokenize", None, f"/tokenize not usable: {error}"), sides
    if found:
        n_ids = sum(len(d["cases"]) for d in found)
        shown = ", ".join(
            f"{d['cases'][0]} ("
            + (f"token {d['first_difference']}: " if "first_difference" in d else "")
            + f"{d['baseline_count']} vs {d['candidate_count']} tokens)"
            for d in found[:5]
        )
        more = f" and {len(found) - 5} more inputs" if len(found) > 5 else ""
        return Check(
            "tokenize",
            False,
            f"{n_ids}/{n} cases tokenize differently (chat template, system prompt or tokenizer drift): {shown}{more}",
            candidate={"differing": found},
        ), sides
    if n_errors:
        return Check("tokenize", None, f"{n_errors}/{distinct} inputs could not be tokenized: {error}"), sides
    return Check("tokenize", True, f"identical token ids for all {n} cases ({distinct} distinct inputs)"), sides


async def _answers(side: _Server | ServerProfile) -> tuple[ProfileAnswer, ProfileAnswer, ProfileAnswer, ProfileAnswer]:
    """models, version, tokenizer, generation defaults: asked of a live server, or as a stored profile kept them."""
    if isinstance(side, ServerProfile):
        return side.models, side.version, side.tokenizer, side.generation_defaults
    models, version, tokenizer, defaults = await asyncio.gather(
        _ask_models(side),
        _ask_version(side),
        _ask_dict(side, "/tokenizer_info", _tokenizer_fields),
        _ask_dict(side, "/server_info?config_format=json", _model_config),
    )
    return models, version, tokenizer, defaults


async def _props(side: _Server | ServerProfile) -> ProfileAnswer:
    return side.props if isinstance(side, ServerProfile) else await _ask_props(side)


def _identity(side: _Server | ServerProfile) -> tuple[str, str]:
    return (side.url, side.model) if isinstance(side, ServerProfile) else (side.t.url, side.t.model)


async def _compare_sides(
    b: _Server | ServerProfile,
    c: _Server | ServerProfile,
    cases: Iterable[Case],
    *,
    concurrency: int,
    names: tuple[str, str],
    key_extra: dict[str, Any],
) -> PreflightResult:
    """Every check, each side asked now (at the same time) or read from what it answered before."""
    (b_url, b_model), (c_url, c_model) = _identity(b), _identity(c)
    result = PreflightResult(b_url, c_url, b_model if b_model == c_model else f"{b_model} / {c_model}")
    pb, pc = await asyncio.gather(_props(b), _props(c))  # first: it decides how each server is asked to tokenize
    (mb, vb, tb, gb), (mc, vc, tc, gc), (tokenize, tallies) = await asyncio.gather(
        _answers(b), _answers(c), _tokenize_check(b, c, cases, concurrency, names, key_extra)
    )
    props = _props_check(pb, pc, names)
    result.checks = [
        *_model_checks(mb, mc, (b_model, c_model), names),
        tokenize,
        *([props] if props else []),
        _dict_check("tokenizer_and_stop_tokens", "/tokenizer_info", tb, tc, names),
        _dict_check("generation_defaults", "/server_info?config_format=json", gb, gc, names),
        _version_check(vb, vc, names),
    ]
    for side, model, answers, prop, tally in (
        (b, b_model, (mb, vb, tb, gb), pb, tallies[0]),
        (c, c_model, (mc, vc, tc, gc), pc, tallies[1]),
    ):
        if isinstance(side, ServerProfile):
            result.profiles.append(side)
            continue
        result.profiles.append(
            ServerProfile(
                url=side.t.public_url,
                model=model,
                models=answers[0],
                version=answers[1],
                tokenizer=answers[2],
                generation_defaults=answers[3],
                props=prop,
                tokens=tally.kept,
                token_inputs=len(tally.kept) + tally.errors,
                token_errors=tally.errors,
                token_error=tally.first_error,
            )
        )
    return result


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
    The result keeps what each server answered (`profiles`), so another
    server can be checked against either later without asking it again.
    """
    async with shared_session(session, 2 * http.concurrency + 8, http.timeout_s) as shared:
        b, c = (_Server(HttpClient(t, http, session=shared)) for t in (baseline, candidate))
        return await _compare_sides(b, c, cases, concurrency=http.concurrency, names=SIDES, key_extra=baseline.extra_body)


async def check_against_profile(
    stored: ServerProfile,
    target: Target,
    cases: Iterable[Case],
    *,
    key_extra: dict[str, Any],
    names: tuple[str, str] = SIDES,
    http: HttpPolicy = PREFLIGHT_HTTP,
) -> PreflightResult:
    """`target` asked the preflight's questions and checked against what another server answered before (`stored`).

    A stored run's baseline is never asked again: the candidate (or a live
    baseline) is compared with the profile the stored run kept of it.
    `key_extra` is the `extra_body` the stored profile's inputs were keyed
    under (its run's baseline's).
    """
    async with shared_session(None, http.concurrency + 8, http.timeout_s) as shared:
        live = _Server(HttpClient(target, http, session=shared))
        return await _compare_sides(stored, live, cases, concurrency=http.concurrency, names=names, key_extra=key_extra)


def compare_profiles(
    baseline: ServerProfile, candidate: ServerProfile, cases: Iterable[Case], *, key_extra: dict[str, Any], names: tuple[str, str] = SIDES
) -> PreflightResult:
    """Two stored profiles checked against each other, nothing asked (`compare` of two stored runs' candidates)."""
    return asyncio.run(_compare_sides(baseline, candidate, cases, concurrency=64, names=names, key_extra=key_extra))


def run_preflight(baseline: Target, candidate: Target, cases: Iterable[Case], *, http: HttpPolicy = PREFLIGHT_HTTP) -> PreflightResult:
    return asyncio.run(preflight(baseline, candidate, cases, http=http))


def preflight_http(opts: RunOptions) -> HttpPolicy:
    """The preflight's calls in a run: the run's policy, its timeout capped at `PREFLIGHT_TIMEOUT_S`."""
    return replace(opts.http, timeout_s=min(opts.timeout_s, PREFLIGHT_TIMEOUT_S))


def identity_problems(result: PreflightResult) -> list[str]:
    """Why the two sides cannot be taken for the same model fed the same prompt: each identity check that failed, and
    each essential one that could not be made (a stored side is then never compared with a guess)."""
    out = [f"{c.name}: {c.detail}" for c in result.checks if c.name in IDENTITY_CHECKS and c.passed is False]
    out += [f"{c.name} could not be checked: {c.detail}" for c in result.checks if c.name in ESSENTIAL_CHECKS and c.passed is None]
    return out


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
