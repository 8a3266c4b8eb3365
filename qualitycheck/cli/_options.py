"""Command-line options, declared once for the `qualitycheck` command and the pytest gate.

The same settings reach a run from `qualitycheck run --baseline URL` and from
`pytest --qc-baseline URL`; declaring them twice let the two drift (help
texts, types, which config key a flag overrides). Following pytest-benchmark's
`add_*_options(addoption, prefix)`, each group is declared here once and added
by whoever parses: the CLI passes `parser.add_argument` with the prefix `--`,
the pytest plugin passes `group.addoption` with `--qc-`. Each option names the
config key it overrides, so turning parsed values into config overrides is
one function (`config_overrides`) for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from qualitycheck.core._errors import ConfigError, Problem

__all__ = [
    "CANARY_COMMAND_OPTIONS",
    "CANARY_OPTIONS",
    "CI_OPTIONS",
    "COMPARE_OPTIONS",
    "IMPORT_OPTIONS",
    "LIKELIHOOD_OPTIONS",
    "PREFLIGHT_OPTIONS",
    "REPLAY_OPTIONS",
    "REPORT_OPTIONS",
    "REVIEW_OPTIONS",
    "RUN_OPTIONS",
    "SHADOW_OPTIONS",
    "SHADOW_TARGET_OPTIONS",
    "STORED_BASELINE_OPTIONS",
    "SWEEP_OPTIONS",
    "TARGET_OPTIONS",
    "Option",
    "add_options",
    "config_overrides",
    "dest",
]


@dataclass(frozen=True)
class Option:
    """One flag: its name without prefix, how it parses, and the config key it overrides."""

    flag: str
    help: str
    key: str | None = None
    """Dotted config key the value overrides (`run.max_tokens`); None when the flag is not a config setting."""
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    action: str | None = None
    """`append` (repeatable) or `store_true` (a switch)."""
    value: Any = None
    """For a switch: the config value it sets when given (`--no-stream` sets `run.stream` to False)."""
    short: str | None = None
    """A short form, for the `qualitycheck` command only (pytest reserves single letters)."""


def dest(option: Option, prefix: str) -> str:
    """The attribute a parsed value lands on: `--qc-max-tokens` → `qc_max_tokens`."""
    return (prefix.lstrip("-") + option.flag).replace("-", "_")


TARGET_OPTIONS = (
    Option("config", "config file (default: ./qualitycheck.yaml if present)", metavar="FILE", short="-c"),
    Option("baseline", "baseline endpoint (OpenAI-compatible base URL)", key="baseline.url", metavar="URL"),
    Option("candidate", "speculative candidate endpoint", key="candidate.url", metavar="URL"),
    Option("control", "second baseline for the A/A noise floor", key="control.url", metavar="URL"),
    Option("model", "served model name for every target without its own", key="model", metavar="NAME"),
    Option("suite", "suite file or folder (repeatable)", metavar="PATH", action="append"),
)
"""Which endpoints and cases: shared by `run`, the pytest gate, and (in part) `preflight` and `sweep`."""

RUN_OPTIONS = (
    Option("out", "run folder (default: reports/<timestamp>); an existing run of the same suites and targets is resumed", metavar="DIR"),
    Option("concurrency", "requests in flight per target", key="run.concurrency", metavar="N", type=int),
    Option("repeats", "answers per case and target (for sampled cases and the noise floor)", key="run.repeats", metavar="N", type=int),
    Option("timeout", "seconds per request", key="run.timeout_s", metavar="S", type=float),
    Option("retries", "retries per request on 429/5xx/timeouts/resets", key="run.retries", metavar="N", type=int),
    Option("max-tokens", "default max_tokens for cases that set none", key="run.max_tokens", metavar="N", type=int),
    Option("seed", "seed for the statistics (bootstrap)", key="run.seed", metavar="N", type=int),
    Option("judge", "judge endpoint (OpenAI-compatible)", key="judge.url", metavar="URL"),
    Option("judge-model", "judge model name (default: --model)", key="judge.model", metavar="NAME"),
    Option("shard", "run only shard I of N (stable hash of case ids)", key="run.shard", metavar="I/N"),
    Option(
        "no-preflight",
        "skip the preflight: served model (a --model a target does not serve is refused), chat template, stop tokens",
        key="run.preflight",
        action="store_true",
        value=False,
    ),
    Option(
        "acceptance-by-category",
        "run categories one after another and scrape /metrics between them",
        key="run.acceptance_by_category",
        action="store_true",
        value=True,
    ),
    Option("no-stream", "non-streaming requests (no TTFT/ITL)", key="run.stream", action="store_true", value=False),
    Option(
        "no-noise-floor",
        "do not ask the baseline again where the candidate's answer differs (without --control or --repeats, "
        "every pass→fail flip then counts as a regression)",
        key="run.noise_floor",
        action="store_true",
        value="none",
    ),
)
"""How a run generates: `run` and the pytest gate."""

STORED_BASELINE_OPTIONS = (
    Option(
        "baseline-run",
        "take the baseline's answers and samples from this stored run folder and ask only the candidate (the suite, "
        "request options and the candidate's preflight must match the stored run's; --baseline URL is then a live baseline "
        "asked alongside, for the noise floor, latency and samples the stored run lacks)",
        metavar="DIR",
    ),
)
"""`run` only: a stored baseline (`pipeline._stored`)."""

COMPARE_OPTIONS = (
    Option(
        "config",
        "config with guardrails, routes and a judge (default: RUN_B's own); the run's design (repeats, sampling, noise floor) stays the stored runs'",
        metavar="FILE",
        short="-c",
    ),
    Option("out", "folder for the comparison (a run folder: `report`, `gate` and `score` work on it)", metavar="DIR"),
)
"""`compare RUN_A RUN_B`: two stored runs gated against each other."""

LIKELIHOOD_OPTIONS = (
    Option(
        "scorer",
        "score every answer under the baseline model on this server (the baseline's weights, no speculation; default: the baseline)",
        key="likelihood.scorer.url",
        metavar="URL",
    ),
    Option(
        "no-likelihood",
        "do not score the answers under the baseline model (the likelihood evidence is then reported missing)",
        key="likelihood.enabled",
        action="store_true",
        value=False,
    ),
)
"""The likelihood stage: `run`, the pytest gate (both flags) and `likelihood DIR` (`--scorer`)."""

REPORT_OPTIONS = (
    Option(
        "report-max-cases",
        "cases report.html embeds in full, regressions and errors first (default 5000; all stay in the store)",
        key="run.report_max_cases",
        metavar="N",
        type=int,
    ),
)


REPLAY_OPTIONS = (
    Option("out", "suite folder to write: one .jsonl per category and replay.json (new, or an earlier replay's)", metavar="SUITE_DIR"),
    Option(
        "sample", "keep N cases, stratified (category × answer length × temperature × prompt length × system prompt)", metavar="N", type=int
    ),
    Option("rules", "rules file (YAML): categories, CSV/Parquet columns, the judge for open-ended requests", metavar="FILE"),
    Option("seed", "seed of the sample (same log and seed: same cases)", metavar="S", type=int),
    Option("keep-pii", "write e-mails, phone and card numbers, IBANs, IPs and keys as logged (not redacted)", action="store_true"),
    Option("workers", "processes that parse and redact (default: 2 for logs over 8 MB, else none)", metavar="N", type=int),
)
"""`replay`: request logs → a suite. No config keys: a replay reads logs, not endpoints."""


IMPORT_OPTIONS = (
    Option("out", "the suite file to write (.jsonl); an earlier import's file is replaced, no other file", metavar="SUITE.jsonl"),
    Option("category", "category of every case (default: the source's name)", metavar="NAME"),
    Option(
        "skip-unmapped",
        "write what maps and list each assert, scorer, field or case that does not as skipped (default: refuse the import, exit 2)",
        action="store_true",
    ),
    Option("prompt", "promptfoo: the prompt template for a tests file without a config (the text, or file://PATH)", metavar="TEMPLATE"),
    Option("registry", "openai-evals: the registry YAML that registers the eval (its class picks the check)", metavar="FILE"),
    Option("eval", "openai-evals: the eval's name in --registry", metavar="NAME"),
    Option("split", "hf-datasets: the split to import (needed when the dataset has several)", metavar="SPLIT"),
    Option("prompt-field", "hf-datasets: the column holding the prompt (text, or chat messages)", metavar="FIELD"),
    Option("reference-field", "hf-datasets: the column holding the reference answer (text, or a list of accepted texts)", metavar="FIELD"),
    Option("id-field", "hf-datasets: the column holding each case's id (default: <name>-<row>)", metavar="FIELD"),
    Option("category-field", "hf-datasets: the column holding each case's category (default: --category)", metavar="FIELD"),
    Option("check", "hf-datasets: how the reference is checked: exact (default), contains or icontains", metavar="CHECK"),
)
"""`import FORMAT SRC`: an eval set of another tool → a suite. No config keys: an import reads files, not endpoints."""


CI_OPTIONS = (
    Option(
        "mlflow",
        "log summary.json's figures as metrics and the report, summary and sign-off as artifacts to this MLflow tracking URI "
        "(e.g. sqlite:///mlflow.db or http://mlflow:5000; the `mlflow` extra)",
        metavar="URI",
    ),
)
"""Where a finished run is published besides its folder: `run`, the stages redone from the store, and `compare`."""


CANARY_OPTIONS = (
    Option(
        "candidate-metrics",
        "the candidate's Prometheus text endpoint (vLLM or SGLang /metrics)",
        key="canary.candidate_metrics",
        metavar="URL",
    ),
    Option("baseline-metrics", "the baseline's /metrics, for TPOT p95 over the same window", key="canary.baseline_metrics", metavar="URL"),
    Option(
        "shadow-metrics",
        "the shadow proxy's /qc/metrics, for the error rate of mirrored requests",
        key="canary.shadow_metrics",
        metavar="URL",
    ),
    Option("dcgm-metrics", "a DCGM exporter's /metrics (GPU utilisation and memory, recorded)", key="canary.dcgm_metrics", metavar="URL"),
    Option(
        "prometheus", "a Prometheus server: read the guardrails with the config's canary.promql", key="canary.prometheus", metavar="URL"
    ),
    Option("run", "a live shadow or canary run folder: the quality guardrail over the pairs stored in the window", metavar="DIR"),
    Option("interval", "evaluate a window this often (e.g. 30s; default: canary.interval, 30s)", key="canary.interval", metavar="DURATION"),
    Option("window", "each evaluation looks this far back (e.g. 5m; default: canary.window, 5m)", key="canary.window", metavar="DURATION"),
    Option(
        "trip-after",
        "consecutive failing windows, each with enough evidence, before a route trips (default 3)",
        key="canary.trip_after",
        metavar="N",
        type=int,
    ),
    Option(
        "listen",
        "serve /qc/metrics, /qc/status, /qc/ready and Flagger's webhooks (/qc/flagger/TYPE) on HOST:PORT "
        "(default 127.0.0.1:0; 0.0.0.0:PORT for a controller in the cluster)",
        key="canary.listen",
        metavar="HOST:PORT",
    ),
    Option("once", "evaluate one window and exit: 0 healthy, 1 tripped, 3 not enough evidence", action="store_true"),
    Option("dry-run", "only record the decisions (canary.jsonl); run no action", action="store_true"),
    Option(
        "on-fail",
        "command run once per tripped route (QC_ROUTE, QC_ACTION, QC_GUARDRAIL, QC_OBSERVED, QC_THRESHOLD; event JSON on stdin)",
        metavar="CMD",
    ),
    Option("webhook", "POST the trip event (JSON) here, with retries", metavar="URL"),
    Option("out", "folder for canary.jsonl and the trip state (default: reports/canary)", metavar="DIR"),
    Option("rearm", "put a tripped route back on speculation and exit", metavar="ROUTE"),
)
"""`canary`: the live watch; with `--config` (the guardrails and the `canary` block)."""


SHADOW_OPTIONS = (
    Option("listen", "address the proxy listens on, e.g. 0.0.0.0:8080 (port 0: any free port)", metavar="HOST:PORT"),
    Option(
        "sink",
        "be the target of a gateway's mirror (nginx mirror, Envoy, Istio) instead of a proxy: answer each request at once "
        "with an empty success, then ask the baseline and the candidate and record the pair",
        key="shadow.sink",
        action="store_true",
        value=True,
    ),
    Option("out", "run folder (with --rotate-every: the folder that holds one run folder per period)", metavar="DIR"),
    Option(
        "sample",
        "share of chat and completions requests mirrored to the candidate (default 0.1)",
        key="shadow.sample",
        metavar="P",
        type=float,
    ),
    Option(
        "max-inflight",
        "mirrored pairs pending at once; beyond it requests are not mirrored, and counted as dropped (default 256)",
        key="shadow.max_inflight",
        metavar="N",
        type=int,
    ),
    Option("rules", "rules file (YAML) naming categories and the judge, as for replay", metavar="FILE"),
    Option(
        "rotate-every",
        "close the run folder and start the next after N pairs or a duration (90s, 30m, 6h, 1d, 1w)",
        key="shadow.rotate_every",
        metavar="N|DURATION",
    ),
    Option("keep-pii", "store prompts and answers as sent (not redacted)", key="shadow.keep_pii", action="store_true", value=True),
    Option(
        "drain-timeout",
        "on SIGTERM, seconds in-flight requests and mirrors may take to finish (default 30)",
        key="shadow.drain_timeout_s",
        metavar="S",
        type=float,
    ),
)
"""`shadow`: the proxy; with `--config`, `--baseline`, `--candidate`, `--model`, `--timeout` and `--no-noise-floor`."""


REVIEW_OPTIONS = (
    Option(
        "sample", "divergent pairs on review.html, stratified by category (default 40); attention checks come on top", metavar="N", type=int
    ),
    Option("per-category", "at most N divergent pairs per category", metavar="N", type=int),
    Option("seed", "seed of the sample and of the answer order (same run and seed: same page)", metavar="S", type=int),
    Option(
        "import",
        "labels exported from review.html: un-blind and fold into the run (repeatable, one file per reviewer)",
        metavar="LABELS.json",
        action="append",
    ),
)
"""`review DIR`: the blinded spot-check page, and the import of its labels."""


def _pick(options: Iterable[Option], *flags: str) -> tuple[Option, ...]:
    by_flag = {o.flag: o for o in options}
    return tuple(by_flag[f] for f in flags)


PREFLIGHT_OPTIONS = _pick(TARGET_OPTIONS, "config", "baseline", "candidate", "model", "suite")
CANARY_COMMAND_OPTIONS = (*_pick(TARGET_OPTIONS, "config"), *CANARY_OPTIONS)
"""`canary`: the config file (guardrails and the `canary` block), then the watch's own flags."""
SHADOW_TARGET_OPTIONS = _pick((*TARGET_OPTIONS, *RUN_OPTIONS), "config", "baseline", "candidate", "model", "timeout", "no-noise-floor")
"""The endpoints of `shadow` (a target without a model forwards the model each caller names)."""
SWEEP_OPTIONS = _pick((*TARGET_OPTIONS, *RUN_OPTIONS), "config", "baseline", "model", "suite", "max-tokens", "repeats", "timeout")
"""`sweep` names its candidates itself (K=URL, or a launch template per k) and sweeps concurrency."""


def add_options(addoption: Callable[..., Any], options: Iterable[Option], prefix: str = "--") -> None:
    """Add `options` through `addoption` (argparse's `add_argument` or pytest's `addoption`)."""
    for o in options:
        names = [prefix + o.flag] + ([o.short] if o.short and prefix == "--" else [])
        kwargs: dict[str, Any] = {"help": o.help, "dest": dest(o, prefix)}
        if o.action is not None:
            kwargs["action"] = o.action
        if o.action != "store_true":
            kwargs["metavar"] = o.metavar
        if o.type is not None:
            kwargs["type"] = o.type
        addoption(*names, **kwargs)


def config_overrides(values: Mapping[str, Any], options: Iterable[Option], prefix: str = "--") -> dict[str, Any]:
    """Parsed values → the dotted config overrides `load_config` applies (None: not given, the file decides)."""
    out: dict[str, Any] = {}
    for o in options:
        if o.key is None:
            continue
        v = values.get(dest(o, prefix))
        if o.action == "store_true":
            v = o.value if v else None
        out[o.key] = v
    if not out.get("judge.url"):
        out["judge.model"] = None  # a judge model alone names no judge; like every target, the judge defaults to --model
    if out.get("run.shard"):
        _check_shard(str(out["run.shard"]), prefix + "shard")
    return out


def _check_shard(s: str, flag: str) -> None:
    try:
        i, n = (int(x) for x in s.split("/"))
        ok = 1 <= i <= n
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError([Problem("command line", None, flag, f"expected I/N with 1 <= I <= N, got {s!r}")])
