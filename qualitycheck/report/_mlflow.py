"""`--mlflow URI`: a finished run as an MLflow run, its figures as metrics and its files as artifacts.

Every number summary.json holds becomes a metric named by its path
(`categories.billing.checks.exact.delta`, `latency.candidate.tpot_ms.p95`,
`guardrails.max_error_rate.observed`; a list of named records is keyed by
`name`, a list of case ids by its `count`, a yes/no by 1 or 0), so a
dashboard compares runs without parsing the file; the verdicts are tags.
The artifacts are summary.json, report.html and signoff.md as written. The
experiment is `MLFLOW_EXPERIMENT_NAME` (MLflow's own variable), else
`qualitycheck`; the MLflow run is named after the run folder. `mlflow` is an
extra, imported only here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import ConfigError, Problem, RunIncompleteError
from qualitycheck.report._html import REPORT_NAME
from qualitycheck.report._signoff import SIGNOFF_NAME

__all__ = ["DEFAULT_EXPERIMENT", "log_run", "require_mlflow", "summary_metrics"]

DEFAULT_EXPERIMENT = "qualitycheck"
_SUMMARY = "summary.json"
_KEY_CHARS = re.compile(r"[^\w\-. :/]")
"""MLflow metric names take alphanumerics, underscores, dashes, periods, spaces, colons and slashes."""
_MAX_KEY = 250
_BATCH = 1000
"""MLflow's log_batch takes at most 1000 metrics per call."""


def require_mlflow() -> Any:
    """The mlflow module, or a ConfigError saying which extra to install (checked before a run spends GPU time)."""
    try:
        import mlflow
    except ImportError:
        raise ConfigError(
            [Problem("command line", None, "--mlflow", "needs the mlflow client: pip install 'qualitycheck[mlflow]'")]
        ) from None
    return mlflow


def _key(path: list[str]) -> str:
    key = _KEY_CHARS.sub("_", ".".join(path))
    return key if len(key) <= _MAX_KEY else key[: _MAX_KEY - 17] + "~" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _walk(value: Any, path: list[str]) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool):
        yield _key(path), 1.0 if value else 0.0
    elif isinstance(value, (int, float)):
        if math.isfinite(value):
            yield _key(path), float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, [*path, str(k)])
    elif isinstance(value, list):
        if value and all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value):
            for v in value:
                yield from _walk({k: x for k, x in v.items() if k != "name"}, [*path, v["name"]])
        elif all(isinstance(v, str) for v in value):
            yield _key([*path, "count"]), float(len(value))
        else:
            for i, v in enumerate(value):
                yield from _walk(v, [*path, str(i)])


def summary_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """Every figure of summary.json as `path → value` (see the module doc)."""
    out = dict(_walk(summary, []))
    out["verdict.pass"] = 1.0 if summary.get("verdict") == "pass" else 0.0
    return out


def _tags(summary: dict[str, Any], folder: Path) -> dict[str, str]:
    tags = {"qualitycheck.verdict": str(summary.get("verdict")), "qualitycheck.folder": str(folder.resolve())}
    for cat, c in (summary.get("categories") or {}).items():
        if isinstance(c, dict) and isinstance(c.get("verdict"), str):
            tags[_key(["qualitycheck.verdict", str(cat)])] = c["verdict"]
    for side, t in (summary.get("targets") or {}).items():
        if isinstance(t, dict):
            for field in ("url", "model"):
                if isinstance(t.get(field), str):
                    tags[f"qualitycheck.{side}.{field}"] = t[field][:5000]
    return tags


def log_run(folder: Path, uri: str) -> str:
    """Log the run in `folder` to the tracking server at `uri`; the MLflow run's id.

    A tracking server that cannot be reached, or refuses, is a
    `RunIncompleteError` (exit 3): the run folder is complete, only its
    publication failed, and the command says so.
    """
    require_mlflow()
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    path = folder / _SUMMARY
    summary = json.loads(path.read_text(encoding="utf-8"))
    run_id: str | None = None
    try:
        client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(name)
        run_id = client.create_run(experiment_id, run_name=folder.resolve().name, tags=_tags(summary, folder)).info.run_id
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in sorted(summary_metrics(summary).items())]
        for i in range(0, len(metrics), _BATCH):
            client.log_batch(run_id, metrics=metrics[i : i + _BATCH])
        for artifact in (_SUMMARY, REPORT_NAME, SIGNOFF_NAME):
            if (folder / artifact).is_file():
                client.log_artifact(run_id, str(folder / artifact))
        client.set_terminated(run_id, "FINISHED")
    except Exception as exc:  # the MLflow client raises its own, requests' and SQLAlchemy's errors
        if run_id is not None:
            try:
                client.set_terminated(run_id, "FAILED")
            except Exception:
                pass
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise RunIncompleteError(f"--mlflow {uri}: could not log the run ({first}); the run itself is complete in {folder}") from None
    return run_id
