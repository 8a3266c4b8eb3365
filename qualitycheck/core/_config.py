"""Targets, run options and the gate's settings, from `qualitycheck.yaml` and flags.

Secrets never live here: a target names the environment variable that holds
its API key (`api_key_env`), and the key is read only when a request is sent.
CLI flags override the file, field by field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from qualitycheck.core._canary_config import CanaryConfig, parse_duration
from qualitycheck.core._errors import ConfigError, Problem

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "Config",
    "JudgeTarget",
    "LikelihoodOptions",
    "RunOptions",
    "ShadowOptions",
    "Target",
    "load_config",
    "parse_rotation",
]

DEFAULT_CONFIG_NAME = "qualitycheck.yaml"
TARGET_NAMES = ("baseline", "candidate", "control")


class Target(BaseModel):
    """One OpenAI-compatible endpoint under test."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    """Base URL, with or without the trailing /v1."""
    model: str
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Merged into every request body (e.g. vLLM's top_k, return_token_ids)."""
    label: str | None = None
    """Shown in reports, e.g. 'ngram k=3'."""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @property
    def _plain_url(self) -> str:
        """`url` without user:password@ (credentials travel in a header, never in the URL)."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.url)
        if parts.username is None and parts.password is None:
            return self.url
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))

    @property
    def base_url(self) -> str:
        """The /v1 root the OpenAI client wants."""
        u = self._plain_url
        return u if u.endswith("/v1") else u + "/v1"

    @property
    def server_url(self) -> str:
        """The server root, where vLLM serves /metrics, /tokenize and /health."""
        return self._plain_url.removesuffix("/v1")

    @property
    def public_url(self) -> str:
        """The URL as it may be written to disk: a password in it is replaced."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = f"{parts.username}:<redacted>@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))

    def auth_headers(self) -> dict[str, str]:
        """The target's headers plus its Authorization: the key from `api_key_env`, else
        the URL's user:password as Basic auth, else vLLM's conventional placeholder key."""
        import base64
        from urllib.parse import unquote, urlsplit

        headers = dict(self.headers)
        if not any(k.lower() == "authorization" for k in headers):
            parts = urlsplit(self.url)
            if self.api_key_env:
                headers["Authorization"] = f"Bearer {self.api_key()}"
            elif parts.username is not None:
                cred = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
                headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
            else:
                headers["Authorization"] = "Bearer EMPTY"
        return headers

    def api_key(self) -> str:
        if self.api_key_env:
            return os.environ.get(self.api_key_env, "")
        return "EMPTY"


class JudgeTarget(Target):
    pass


class RunOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(default=8, ge=1, le=4096)
    """Requests in flight per target."""
    timeout_s: float = Field(default=120.0, gt=0)
    retries: int = Field(default=3, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    """Base of the exponential backoff between retries (with full jitter)."""
    repeats: int = Field(default=1, ge=1, le=1000)
    """Answers per case and target. Above 1 it fixes the number for every case; at 1 (the default) greedy
    cases are asked once and sampled cases (temperature > 0) in rounds, up to `max_samples_per_case`."""
    max_samples_per_case: int = Field(default=10, ge=1, le=1000)
    """Budget of samples per side for a sampled case: rounds add `sample_round` samples to the cases of
    categories still undecided until their pass rates decide, or this many were taken."""
    sample_round: int = Field(default=2, ge=1, le=1000)
    """Samples per side a round adds to each undecided sampled case (the first round takes this many too)."""
    detectable_drop: float = Field(default=0.10, gt=0, lt=1)
    """The drop in a sampled category's pass rate the run must be able to detect (80% power) before it
    passes the category: a category that cannot rule it out within the budget is inconclusive."""
    seed: int = 0
    max_tokens: int | None = Field(default=None, ge=1)
    """Default max_tokens for cases that do not set one."""
    stream: bool = True
    return_token_ids: bool = True
    """Ask vLLM for token ids (first divergence in tokens); harmless elsewhere."""
    preflight: bool = True
    acceptance_by_category: bool = False
    noise_floor: Literal["auto", "none"] = "auto"
    """How the A/A noise floor is measured. `auto`: from the control target when there is one, else
    from the repeats when there are several, else by asking the baseline again for every case whose
    candidate answer differs from the baseline's (the only cases that can regress). `none` measures
    nothing: every pass→fail flip then counts as a regression."""
    shard: str | None = None
    """'i/n': run only the cases whose stable hash falls in shard i of n."""
    gpu_hour_usd: float | None = Field(default=None, ge=0)
    judge_retries: int = Field(default=2, ge=0, le=10)
    report_max_cases: int = Field(default=5000, ge=1)
    """Cases report.html embeds in full, the most important first; all of them stay in the store."""


_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"})


def parse_rotation(value: str | int) -> tuple[int | None, float | None]:
    """`--rotate-every`: a number of stored pairs (`100000`) or a duration (`90s`, `30m`, `6h`, `1d`, `1w`).

    Returns (pairs, seconds), one of them None; raises ValueError with the accepted forms. A
    duration reads as the canary's do (`parse_duration`), but must carry its unit here: a bare
    number is a count of pairs.
    """
    text = str(value).strip().lower()
    if text.isdigit() and int(text) > 0:
        return int(text), None
    if text[-1:].isalpha():
        try:
            return None, parse_duration(text)
        except ValueError:
            pass
    raise ValueError(f"expected a number of pairs (e.g. 100000) or a duration (90s, 30m, 6h, 1d, 1w), got {value!r}")


class ShadowOptions(BaseModel):
    """`qualitycheck shadow`: how much live traffic is mirrored to the candidate and where it is recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample: float = Field(default=0.1, ge=0.0, le=1.0)
    """Share of chat and completions requests mirrored to the candidate and recorded."""
    max_inflight: int = Field(default=256, ge=1, le=100_000)
    """Mirrored pairs pending at once (answering, or waiting to be stored); more are dropped and counted."""
    tag_headers: dict[str, str] = Field(default_factory=lambda: {"X-Route": "route", "X-Tenant": "tenant"})
    """Request header → case tag (`route` names the route the gate and the fallback plan speak of)."""
    rotate_every: str | None = None
    """Close the run folder and start the next after this many stored pairs, or this long (`6h`, `1d`)."""
    keep_pii: bool = False
    """Store prompts and answers as sent, not redacted (the replay privacy rules otherwise)."""
    drain_timeout_s: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long in-flight requests and mirrors may take to finish."""
    scrape_every_s: float = Field(default=60.0, ge=0)
    """How often the candidate's (and baseline's) /metrics are scraped into an acceptance window; 0: only when a
    folder opens and closes."""
    summarize_rotated: bool = True
    """Score a rotated folder and write its summary.json in a child process (at low priority)."""
    max_body_mb: float = Field(default=64.0, gt=0)
    """Largest request body accepted (the proxy reads a body whole to mirror it)."""
    sink: bool = False
    """Be the sink of a gateway's mirror (nginx `mirror`, Envoy, Istio) instead of a proxy in the callers' path:
    answer every request at once, then ask the baseline and the candidate and record the pair."""

    @field_validator("rotate_every", mode="before")
    @classmethod
    def _rotation(cls, v: Any) -> Any:
        if v is not None:
            parse_rotation(v)
            return str(v).strip()
        return v

    @field_validator("tag_headers")
    @classmethod
    def _no_secret_headers(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(h for h in v if h.lower() in _SECRET_HEADERS)
        if bad:
            raise ValueError(f"{', '.join(bad)} carry credentials and are never stored as tags")
        return v

    @property
    def rotation(self) -> tuple[int | None, float | None]:
        """(pairs, seconds) after which a folder is closed; (None, None): never."""
        return parse_rotation(self.rotate_every) if self.rotate_every else (None, None)


class LikelihoodOptions(BaseModel):
    """The likelihood stage: every stored answer scored under the baseline model (`qualitycheck.likelihood`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """Score the answers after each sampling round; `--no-likelihood` switches it off (the evidence is then reported missing)."""
    scorer: Target | None = None
    """The server that scores: by default the baseline target itself. Another server must serve the baseline's weights
    without speculation (`--scorer URL`; its model defaults to the baseline's)."""
    top_k: int = Field(default=20, ge=1, le=1000)
    """Most likely tokens asked for at each position: the rank and margin of a divergent token within it. vLLM refuses more
    than its `--max-logprobs` (20 by default)."""
    least_likely: int = Field(default=5, ge=0, le=100)
    """Least likely tokens kept per answer, with their positions and text."""
    concurrency: int | None = Field(default=None, ge=1, le=4096)
    """Scoring requests in flight (default: `run.concurrency`)."""


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: Target | None = None
    candidate: Target | None = None
    control: Target | None = None
    judge: JudgeTarget | None = None
    suites: list[str] = Field(default_factory=list)
    run: RunOptions = RunOptions()
    speculative_decoding_guardrails: dict[str, Any] = Field(default_factory=dict)
    """The seed's guardrail block, verbatim; gate.py interprets it."""
    routes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-route guardrail overrides."""
    non_inferiority_margin: dict[str, float] = Field(default_factory=dict)
    """Per check, the largest pass-rate drop still called non-inferior."""
    allow_not_evaluated: bool = False
    """Let a run pass when some guardrail could not be evaluated."""
    judges_dir: str | None = None
    canary: CanaryConfig = CanaryConfig()
    """`qualitycheck canary` only: metric sources, evidence minimums, windows (core/_canary_config.py)."""
    shadow: ShadowOptions = ShadowOptions()
    """`qualitycheck shadow` only."""
    likelihood: LikelihoodOptions = LikelihoodOptions()
    """The likelihood stage (`qualitycheck.likelihood`)."""
    source: str | None = Field(default=None, exclude=True)

    def targets(self) -> dict[str, Target]:
        return {n: t for n in TARGET_NAMES if (t := getattr(self, n)) is not None}


def _problems(exc: ValidationError, path: str, finder: Any) -> list[Problem]:
    from qualitycheck.core._cases import printable_key

    out = []
    for err in exc.errors():
        loc = err["loc"]
        field = ".".join(printable_key(str(x)) for x in loc)
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required field is missing"
        out.append(Problem(path, finder(loc) if finder else None, field, msg))
    return out


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Read the config file (if any) and apply CLI overrides (dotted keys)."""
    data: dict[str, Any] = {}
    finder = None
    src = None
    if path is None and Path(DEFAULT_CONFIG_NAME).is_file():
        path = DEFAULT_CONFIG_NAME
    if path is not None:
        src = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text) or {}
        except OSError as exc:
            raise ConfigError([Problem(src, None, "", f"cannot read config: {exc.strerror}")]) from None
        except yaml.YAMLError as exc:
            from qualitycheck.core._cases import yaml_problem

            raise ConfigError([yaml_problem(src, exc)]) from None
        except UnicodeDecodeError as exc:
            raise ConfigError([Problem(src, None, "", f"not UTF-8 text: {exc.reason}")]) from None
        if not isinstance(data, dict):
            raise ConfigError([Problem(src, 1, "", "expected a mapping of settings")])
        from qualitycheck.core._cases import _yaml_line_finder

        finder = _yaml_line_finder(node) if node is not None else None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        cur = data
        keys = dotted.split(".")
        for k in keys[:-1]:
            if not isinstance(cur.get(k), dict):
                cur[k] = {}
            cur = cur[k]
        cur[keys[-1]] = value
    # --model applies to every target that has no model of its own
    model = data.pop("model", None)
    for name in (*TARGET_NAMES, "judge"):
        t = data.get(name)
        if isinstance(t, dict) and model and "model" not in t:
            t["model"] = model
    scorer = data.get("likelihood", {}).get("scorer") if isinstance(data.get("likelihood"), dict) else None
    if isinstance(scorer, dict) and "model" not in scorer:  # the scorer serves the baseline's weights: its model by default
        base = data.get("baseline")
        if (named := model or (base.get("model") if isinstance(base, dict) else None)) is not None:
            scorer["model"] = named
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, src or "command line", finder)) from None
    return cfg.model_copy(update={"source": src})
