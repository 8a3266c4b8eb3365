"""The settings blocks a stage is handed: targets, run options, shadow options.

The whole file (`Config`, `load_config`) is `core._config_file`'s: the stages
below the pipeline take these blocks, never the whole config, and an
import-linter contract keeps them from importing it (docs/ARCHITECTURE.md,
"Each stage takes its own settings").

Secrets never live here: a target names the environment variable that holds
its API key (`api_key_env`), and the key is read only when a request is sent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from qualitycheck.core._canary_config import parse_duration
from qualitycheck.core._errors import Problem

__all__ = ["TARGET_NAMES", "HttpPolicy", "JudgeTarget", "LikelihoodOptions", "RunOptions", "ShadowOptions", "Target", "parse_rotation"]

TARGET_NAMES = ("baseline", "candidate", "control")
"""The sides a run can ask, in the order every stage lists them."""


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


@dataclass(frozen=True, slots=True)
class HttpPolicy:
    """How one target is called: each try's bound, how many more tries and how far apart, and how many at once.

    The one value every `core._http.HttpClient` is built with. A run's is
    `RunOptions.http`; a caller with settings of its own (a /metrics scrape,
    the preflight, a canary's webhook) makes its own.
    """

    timeout_s: float
    """The bound of one try, from connecting to the last byte (also the session's connect and read timeouts)."""
    retries: int
    """Tries after the first, for a failure another try may fix (a 5xx, 429, timeout, broken stream)."""
    backoff_s: float
    """Base of the full-jitter exponential backoff between tries (a 429's Retry-After wins)."""
    concurrency: int = 1
    """Requests the client is sized for: its own session's connections (never fewer than `core._http`'s minimum)."""


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

    @property
    def http(self) -> HttpPolicy:
        """How the run calls its targets and its judge: `timeout_s`, `retries`, `backoff_s`, `concurrency`."""
        return HttpPolicy(timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s, concurrency=self.concurrency)


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


DEFAULT_SHIFT_NATS = 0.5
"""The likelihood shift (nats per token) a sampled category must be able to detect before it passes (docs/stages/verdict.md)."""
DEFAULT_NEAR_TIE_NATS = 0.5
"""A greedy divergence within this many nats of the baseline model's first choice is numerics (docs/stages/verdict.md)."""
DEFAULT_DECISIVE_NATS = 4.6
"""A greedy divergence this many nats below the baseline model's first choice (a probability 100 times smaller) is decisive."""


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
    detectable_shift: float = Field(default=DEFAULT_SHIFT_NATS, gt=0, le=20)
    """The shift in mean log-likelihood per token (nats) a sampled category must be able to detect before it passes."""
    near_tie_nats: float = Field(default=DEFAULT_NEAR_TIE_NATS, ge=0, le=20)
    """A greedy divergence to a token within this many nats of the baseline model's first choice is numerics."""
    decisive_nats: float = Field(default=DEFAULT_DECISIVE_NATS, gt=0, le=50)
    """A greedy divergence to a token this many nats below the baseline model's first choice (or below the top-k) is one
    the baseline would not write: a finding (`decisive_divergence`), whatever the checks say."""
    divergence_report_only: bool = False
    """Report decisive divergences without counting them against `max_quality_regression_cases`."""


def _problems(exc: ValidationError, path: str, finder: Any, model: type[BaseModel] | None = None) -> list[Problem]:
    """pydantic's errors as `Problem`s: each field path as the user wrote it, with its line when `finder` knows it.

    Shared by every settings file (the config, the replay rules), so a bad
    value reads the same wherever it was written; an unknown key of `model`
    names the key it may have meant.
    """
    from qualitycheck.core._cases import printable_key

    out = []
    for err in exc.errors():
        loc = err["loc"]
        field = ".".join(printable_key(str(x)) for x in loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _did_you_mean(str(loc[-1]), _keys_at(model, loc[:-1]))
        elif err["type"] == "missing":
            msg = "required field is missing"
        out.append(Problem(path, finder(loc) if finder else None, field, msg))
    return out


def _keys_at(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model accepts at `loc` (through nested models and mappings of models); none when it cannot tell."""
    import typing

    def as_model(t: Any) -> type[BaseModel] | None:
        return next((a for a in (t, *typing.get_args(t)) if isinstance(a, type) and issubclass(a, BaseModel)), None)

    node = model
    i = 0
    while i < len(loc):
        if node is None or str(loc[i]) not in node.model_fields:
            return []
        annotation = node.model_fields[str(loc[i])].annotation
        i += 1
        if typing.get_origin(annotation) is dict:  # a mapping: the next part of loc is one of its keys
            annotation, i = typing.get_args(annotation)[1], i + 1
        node = as_model(annotation)
    return list(node.model_fields) if node is not None else []


def _did_you_mean(key: str, known: list[str]) -> str:
    import difflib

    if not known:
        return ""
    near = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(known)})"
