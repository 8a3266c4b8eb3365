"""pytest gate: `pytest --qc-...` runs a suite (or reads a stored run) and gates it.

Registered through the `pytest11` entry point, so it is loaded by every pytest
run in an environment where qualitycheck is installed: without a `--qc-`
option it does nothing at all.

With options, the run (or the re-gate of `--qc-run DIR`) happens once, in
the controlling process, while pytest configures itself; then one test item
per guardrail, per category verdict and per regression case is collected
from the resulting summary.json, so the outcome shows up in every pytest
report format (`--junitxml` included). Under pytest-xdist the workers get
the summary's path from the controller and collect the same items from it,
without calling endpoints. The session's exit status follows the verdict.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _pytest._code.code import TerminalRepr

from qualitycheck.cli._options import (
    CI_OPTIONS,
    LIKELIHOOD_OPTIONS,
    REPORT_OPTIONS,
    RUN_OPTIONS,
    STORED_BASELINE_OPTIONS,
    TARGET_OPTIONS,
    add_options,
    config_overrides,
    dest,
)

__all__ = ["QualitycheckItem", "pytest_addoption", "pytest_configure"]

if TYPE_CHECKING:
    from qualitycheck.verdict._model import Summary

SUMMARY_KEY = pytest.StashKey["Summary"]()
SUMMARY_PATH_KEY = pytest.StashKey[str]()
_PREFIX = "--qc-"
_GATE_OPTIONS = (*TARGET_OPTIONS, *RUN_OPTIONS, *STORED_BASELINE_OPTIONS, *LIKELIHOOD_OPTIONS, *REPORT_OPTIONS, *CI_OPTIONS)
"""The `qualitycheck run` flags, declared once in the CLI and added here with the `--qc-` prefix."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qualitycheck", "qualitycheck gate (speculative decoding candidate vs baseline)")
    add_options(group.addoption, _GATE_OPTIONS, _PREFIX)
    group.addoption("--qc-run", metavar="DIR", help="gate a stored run folder without calling endpoints")


def qc_requested(config: pytest.Config) -> bool:
    """True when any --qc- option was given (the plugin stays inert otherwise)."""
    return bool(config.getoption("qc_run") or any(config.getoption(dest(o, _PREFIX)) for o in _GATE_OPTIONS))


def _run_or_regate(config: pytest.Config) -> Path:
    """Generate and gate (or re-gate a stored run); returns the run folder holding summary.json."""
    from qualitycheck.core._config_file import load_config
    from qualitycheck.core._errors import ConfigError, Problem, QualitycheckError
    from qualitycheck.pipeline._run import redo, run

    opt = config.getoption
    try:
        if opt("qc_mlflow"):  # before the run spends GPU time
            from qualitycheck.report._mlflow import require_mlflow

            require_mlflow()
        if opt("qc_run"):
            folder = Path(opt("qc_run"))
            redo(folder, "gate", opt("qc_config"))
            return _published(folder, opt("qc_mlflow"))
        values = {dest(o, _PREFIX): opt(dest(o, _PREFIX)) for o in _GATE_OPTIONS}
        cfg = load_config(opt("qc_config"), config_overrides(values, _GATE_OPTIONS, _PREFIX))
        suites = opt("qc_suite") or cfg.suites
        if not suites:
            raise ConfigError(
                [Problem(cfg.source or "command line", None, "--qc-suite", "no suite given (--qc-suite PATH or `suites:` in --qc-config)")]
            )
        stored = Path(opt("qc_baseline_run")) if opt("qc_baseline_run") else None
        if (cfg.baseline is None and stored is None) or cfg.candidate is None:
            raise ConfigError(
                [
                    Problem(
                        cfg.source or "command line",
                        None,
                        "--qc-baseline/--qc-candidate",
                        "both endpoints are needed to run a suite (or --qc-baseline-run DIR and a candidate, or --qc-run DIR)",
                    )
                ]
            )
        out = Path(opt("qc_out")) if opt("qc_out") else Path("reports") / time.strftime("pytest-%Y%m%d-%H%M%S")
        run(cfg, suites, out, baseline_run=stored)
        return _published(out, opt("qc_mlflow"))
    except QualitycheckError as exc:
        raise pytest.UsageError(f"qualitycheck: {exc}") from None


def _published(folder: Path, mlflow_uri: str | None) -> Path:
    """`--qc-mlflow URI`: the gated run logged to MLflow, as `qualitycheck run --mlflow` logs it."""
    if mlflow_uri:
        from qualitycheck.report._mlflow import log_run

        log_run(folder, mlflow_uri)
    return folder


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "qualitycheck: a gate decision of qualitycheck (guardrail, category, regression case)")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        path = workerinput.get("qc_summary")
        if path:
            _load(config, path)
        return
    if not qc_requested(config):
        return
    from qualitycheck.verdict._summary import SUMMARY_NAME

    folder = _run_or_regate(config)
    _load(config, str(folder / SUMMARY_NAME))
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistController(), "qualitycheck-xdist")


def _load(config: pytest.Config, path: str) -> None:
    from qualitycheck.core._errors import StoreError
    from qualitycheck.verdict._model import read_summary

    try:
        config.stash[SUMMARY_KEY] = read_summary(Path(path))
    except StoreError as exc:
        raise pytest.UsageError(f"qualitycheck: {exc}") from None
    config.stash[SUMMARY_PATH_KEY] = path


class _XdistController:
    """Hands the summary's path to each xdist worker, so workers collect without running anything."""

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["qc_summary"] = node.config.stash[SUMMARY_PATH_KEY]


class QualitycheckFailure(Exception):
    """A gate item failed; its message is the whole report line."""


class QualitycheckItem(pytest.Item):
    """One gate decision as a test: passes, fails with the reason, skips or xfails."""

    def __init__(self, *, outcome: str, message: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.outcome = outcome
        """pass | fail | skip | xfail"""
        self.message = message
        self.add_marker(pytest.mark.qualitycheck)

    def runtest(self) -> None:
        if self.outcome == "skip":
            pytest.skip(self.message)
        if self.outcome == "xfail":
            pytest.xfail(self.message)
        if self.outcome == "fail":
            raise QualitycheckFailure(self.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, QualitycheckFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return str(self.path), None, self.name


def gate_items(summary: Summary) -> list[tuple[str, str, str]]:
    """(name, outcome, message) for every gate decision, in a stable order (xdist compares collections).

    Renders summary.json: which regressions count and which are tolerated is
    what verdict._status recorded there, read back through `check_statuses`.
    """
    from qualitycheck.verdict._status import check_statuses

    allow = summary.allow_not_evaluated
    out: list[tuple[str, str, str]] = []
    for g in summary.guardrails:
        route = "" if g.route == "*" else f"[{g.route}]"
        outcome = {True: "pass", False: "fail", None: "skip" if allow else "fail"}[g.passed]
        msg = g.message
        if g.passed is None and not allow:
            msg += " — a guardrail that was not evaluated makes the verdict inconclusive (allow_not_evaluated: true accepts it)"
        out.append((f"guardrail::{g.name}{route}", outcome, msg))
    for cat, c in summary.categories.items():
        out.append((f"category::{cat}", "pass" if c.verdict == "pass" else "fail", f"category {cat}: {c.verdict}: {c.verdict_reason}"))
        for check, k in c.checks.items():
            statuses = check_statuses(k)
            for case_id in k.regressions:
                msg = (
                    f"{cat}/{case_id}: {check} passed on the baseline and failed on the candidate "
                    f"(category {check}: {_pct(k.baseline_pass_rate)} → {_pct(k.candidate_pass_rate)})"
                )
                if statuses[case_id] == "regression":
                    out.append((f"regression::{cat}::{check}::{case_id}", "fail", msg))
                else:
                    out.append(
                        (
                            f"regression::{cat}::{check}::{case_id}",
                            "xfail",
                            msg + "; tolerated: within the noise floor or the route's allowance",
                        )
                    )
            for case_id in k.flaky_regressions:
                out.append(
                    (
                        f"flaky::{cat}::{check}::{case_id}",
                        "xfail",
                        f"{cat}/{case_id}: {check} dropped on the candidate, but the baseline disagrees with itself on this case (flaky)",
                    )
                )
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is None:
        return
    for name, outcome, message in gate_items(summary):
        items.append(QualitycheckItem.from_parent(session, name=f"qualitycheck::{name}", outcome=outcome, message=message))


def pytest_report_header(config: pytest.Config) -> str | None:
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is None or hasattr(config, "workerinput"):
        return None
    return f"qualitycheck: {config.stash[SUMMARY_PATH_KEY]} — verdict {summary.verdict}"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Exit status follows the verdict: a non-pass verdict never exits 0."""
    config = session.config
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is None or hasattr(config, "workerinput"):
        return
    if summary.verdict != "pass" and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is None or hasattr(config, "workerinput"):
        return
    tr = terminalreporter
    tr.write_sep("=", f"qualitycheck verdict: {summary.verdict.upper()}")
    fb = summary.fallback
    if fb.routes:
        tr.write_line(f"fallback: {fb.configured_action or fb.action} on {', '.join(fb.routes)}")
    for item in summary.not_evaluated:
        tr.write_line(f"not evaluated: {item}")
    tr.write_line(f"summary: {config.stash[SUMMARY_PATH_KEY]}")
