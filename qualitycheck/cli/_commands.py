"""What each `qualitycheck` subcommand does, once its arguments are parsed (Contract 2).

Thin: each command turns its flags into a config and calls a stage. Heavy
imports happen only inside the command that needs them, so `--help` and
`validate` stay fast. Exit codes are named once, here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from qualitycheck.cli._options import (
    LIKELIHOOD_OPTIONS,
    REPORT_OPTIONS,
    RUN_OPTIONS,
    SHADOW_OPTIONS,
    SHADOW_TARGET_OPTIONS,
    SWEEP_OPTIONS,
    TARGET_OPTIONS,
    config_overrides,
)
from qualitycheck.core._errors import ConfigError, Problem

__all__ = ["COMMANDS", "EXIT_FAIL", "EXIT_INCOMPLETE", "EXIT_INPUT", "EXIT_PASS"]

EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3


def _suites(a: argparse.Namespace, cfg: Any) -> list[str]:
    suites = a.suite or cfg.suites
    if not suites:
        raise ConfigError(
            [Problem(cfg.source or "command line", None, "suites", "no suite given (--suite PATH or `suites:` in the config)")]
        )
    return list(suites)


def cmd_validate(a: argparse.Namespace) -> int:
    from qualitycheck.core._cases import load_suite
    from qualitycheck.judge._judge import judge_dirs, load_judges, validate_judge_checks

    cases = load_suite(a.paths)
    validate_judge_checks(cases, load_judges(judge_dirs()))
    cats: dict[str, int] = {}
    for c in cases:
        cats[c.category] = cats.get(c.category, 0) + 1
    print(f"{len(cases)} cases OK in {len(cats)} categories: " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    return EXIT_PASS


def cmd_run(a: argparse.Namespace) -> int:
    from qualitycheck.core._config_file import load_config
    from qualitycheck.pipeline._run import run

    cfg = load_config(a.config, config_overrides(vars(a), (*TARGET_OPTIONS, *RUN_OPTIONS, *LIKELIHOOD_OPTIONS, *REPORT_OPTIONS)))
    stored = Path(a.baseline_run) if a.baseline_run else None
    # with a stored baseline, --baseline is a live one asked alongside, and may be left out
    missing = [n for n in ("baseline", "candidate") if getattr(cfg, n) is None and not (n == "baseline" and stored)]
    if missing:
        raise ConfigError(
            [Problem(cfg.source or "command line", None, n, f"no {n} target (--{n} URL or `{n}:` in the config)") for n in missing]
        )
    suites = _suites(a, cfg)
    out = Path(a.out) if a.out else Path("reports") / time.strftime("%Y%m%d-%H%M%S")
    _check_publishers(a)
    return _published(a, out, run(cfg, suites, out, baseline_run=stored))


def cmd_compare(a: argparse.Namespace) -> int:
    """Two stored runs gated against each other, in a new run folder; nothing is asked of any target."""
    from qualitycheck.pipeline._compare import compare_runs

    if not a.out:
        raise ConfigError([Problem("command line", None, "--out", "required: the folder to write the comparison to")])
    _check_publishers(a)
    return _published(a, Path(a.out), compare_runs(a.run_a, a.run_b, a.out, a.config))


def cmd_stage(a: argparse.Namespace) -> int:
    from qualitycheck.pipeline._run import redo

    if a.report_max_cases is not None and a.report_max_cases < 1:
        raise ConfigError(
            [Problem("command line", None, "--report-max-cases", f"expected a whole number of at least 1, got {a.report_max_cases}")]
        )
    _check_publishers(a)
    return _published(a, Path(a.dir), redo(Path(a.dir), a.command, a.config, report_max_cases=a.report_max_cases))


def _check_publishers(a: argparse.Namespace) -> None:
    """A publisher that cannot work is refused before the run spends GPU time (the mlflow extra missing)."""
    if a.mlflow:
        from qualitycheck.report._mlflow import require_mlflow

        require_mlflow()


def _published(a: argparse.Namespace, folder: Path, code: int) -> int:
    """The run's verdict, once CI has it: under GitHub Actions the step summary and the annotations (`run`, `gate`,
    `compare`),
    and with `--mlflow` the MLflow run (a tracking server that fails is exit 3, the folder being complete)."""
    if a.command in ("run", "gate", "compare"):
        from qualitycheck.report._github import github_actions

        github_actions(folder)
    if a.mlflow:
        from qualitycheck.report._mlflow import log_run

        run_id = log_run(folder, a.mlflow)
        print(f"qualitycheck: logged to MLflow {a.mlflow} as run {run_id}", file=sys.stderr)
    return code


def cmd_likelihood(a: argparse.Namespace) -> int:
    """Score a stored run's answers under the baseline model: those without a current record (all of them for a new `--scorer`)."""
    import dataclasses

    from pydantic import ValidationError

    from qualitycheck.core._config import Target
    from qualitycheck.core._config_file import load_config
    from qualitycheck.core._errors import first_problem
    from qualitycheck.core._store import RunStore
    from qualitycheck.generation._progress import RichProgress
    from qualitycheck.likelihood import score_likelihoods
    from qualitycheck.pipeline._likelihood import likelihood_settings

    with RunStore.open(Path(a.dir)) as store:
        cfg = load_config(a.config) if a.config else store.config()
        # a run of a stored baseline (`run --baseline-run`, `compare`) names no baseline in its config: its manifest
        # holds the target the baseline's answers were asked of, whose model the scorer serves and whose template
        # renders the prompts (`likelihood_settings`); it is never asked anything
        stored = (store.manifest.get("targets") or {}).get("baseline") if cfg.baseline is None else None
        try:
            asked = Target.model_validate({k: v for k, v in stored.items() if k in Target.model_fields}) if stored else None
        except ValidationError:  # a manifest from another version: score with what the config and --scorer say
            asked = None
        if a.scorer:
            baseline = cfg.baseline or asked
            model = cfg.likelihood.scorer.model if cfg.likelihood.scorer else baseline.model if baseline else None
            try:
                scorer = Target(url=a.scorer, model=model or "")
            except ValidationError as exc:
                raise ConfigError([Problem("command line", None, "--scorer", first_problem(exc))]) from None
            cfg = cfg.model_copy(update={"likelihood": cfg.likelihood.model_copy(update={"scorer": scorer})})
        settings = likelihood_settings(cfg, baseline=asked)
        if settings is None:
            raise ConfigError([Problem(str(a.dir), None, "baseline", "the run has no baseline target to score with; give --scorer URL")])
        stage = score_likelihoods(store, dataclasses.replace(settings, enabled=True), progress=RichProgress())
    return EXIT_INCOMPLETE if not stage.evaluated or stage.errors else EXIT_PASS


def cmd_demo(a: argparse.Namespace) -> int:
    from qualitycheck.pipeline._demo import run_demo

    return run_demo(Path(a.out) if a.out else None, engine=a.engine)


def cmd_merge(a: argparse.Namespace) -> int:
    from qualitycheck.pipeline._merge import merge_runs

    return merge_runs(a.dirs, a.out)


def cmd_preflight(a: argparse.Namespace) -> int:
    import json

    from qualitycheck.core._cases import load_suite
    from qualitycheck.core._config_file import load_config
    from qualitycheck.generation._preflight import ESSENTIAL_CHECKS, format_preflight, preflight_http, run_preflight

    cfg = load_config(a.config, config_overrides(vars(a), TARGET_OPTIONS))
    missing = [n for n in ("baseline", "candidate") if getattr(cfg, n) is None]
    if missing:
        raise ConfigError([Problem(cfg.source or "command line", None, f"--{m}", "required (a URL, with --model)") for m in missing])
    assert cfg.baseline is not None and cfg.candidate is not None
    cases = load_suite(_suites(a, cfg))
    result = run_preflight(cfg.baseline, cfg.candidate, cases, http=preflight_http(cfg.run))
    print(json.dumps(result.to_dict(), indent=2) if a.json else format_preflight(result))
    if not result.ok:
        return EXIT_FAIL
    unchecked = [c.name for c in result.checks if c.name in ESSENTIAL_CHECKS and c.passed is None]
    if unchecked:
        print(f"qualitycheck: preflight could not check {', '.join(unchecked)} (see above)", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_PASS


def cmd_sweep(a: argparse.Namespace) -> int:
    from qualitycheck.core._cases import SuiteCases, scan_suite
    from qualitycheck.core._config_file import load_config
    from qualitycheck.pipeline._sweep import SweepCandidate, parse_candidate, parse_levels, print_table, run_sweep

    cfg = load_config(a.config, config_overrides(vars(a), SWEEP_OPTIONS))
    if cfg.baseline is None and not a.baseline_launch:
        raise ConfigError([Problem("command line", None, "--baseline", "required: a URL, or --baseline-launch TEMPLATE")])
    model = a.model or (cfg.baseline.model if cfg.baseline else None)
    if a.baseline_launch and not model:
        raise ConfigError([Problem("command line", None, "--model", "required with --baseline-launch")])
    candidates = [parse_candidate(s) for s in a.candidate]
    if a.launch:
        if not a.k:
            raise ConfigError([Problem("command line", None, "--k", "required with --launch (the k values to start, e.g. 1,3,5)")])
        if "{k}" not in a.launch:
            raise ConfigError([Problem("command line", None, "--launch", "the template has no {k}: every candidate would be the same")])
        candidates += [SweepCandidate(str(k), template=a.launch) for k in parse_levels(a.k, "--k")]
    if not candidates:
        raise ConfigError([Problem("command line", None, "--candidate", "give at least one K=URL, or --launch TEMPLATE with --k")])
    levels = parse_levels(a.concurrency)
    suites = _suites(a, cfg)
    scan = scan_suite(suites)  # every problem of the suite before any server starts
    cases = SuiteCases(suites, count=scan.count)
    out = Path(a.out) if a.out else Path("reports") / time.strftime("sweep-%Y%m%d-%H%M%S")
    result = run_sweep(cfg, cases, suites, candidates, levels, out, baseline_template=a.baseline_launch, model=model)
    print_table(result)
    print(f"qualitycheck: sweep written to {out / 'sweep.json'} and {out / 'sweep.html'}", file=sys.stderr)
    if result["failed_cells"]:
        print(
            f"qualitycheck: {len(result['failed_cells'])} sweep cell(s) failed: {', '.join(result['failed_cells'])} "
            "(error kinds in the table above and in sweep.json)",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    return EXIT_PASS


def cmd_replay(a: argparse.Namespace) -> int:
    from qualitycheck.traffic._replay import ReplayOptions, replay, summary_lines
    from qualitycheck.traffic._rules import load_rules

    if not a.out:
        raise ConfigError([Problem("command line", None, "--out", "required: the suite folder to write")])
    for flag, value in (("--sample", a.sample), ("--workers", a.workers)):
        if value is not None and value < 1:
            raise ConfigError([Problem("command line", None, flag, f"expected a whole number of at least 1, got {value}")])
    rules = load_rules(a.rules)
    if rules.judge is not None:  # an unknown judge is refused now, not when the suite is run
        from qualitycheck.judge._judge import judge_dirs, load_judges

        known = load_judges(judge_dirs())
        if rules.judge.mode not in known:
            raise ConfigError(
                [Problem(a.rules, None, "judge.mode", f"unknown judge {rules.judge.mode!r} (known: {', '.join(sorted(known))})")]
            )
    options = ReplayOptions(sample=a.sample, seed=a.seed or 0, rules=rules, keep_pii=a.keep_pii, workers=a.workers)
    manifest = replay(a.logs, a.out, options)
    print("\n".join(summary_lines(manifest, a.out)))
    return EXIT_PASS


def _listen(value: str | None) -> tuple[str, int]:
    """`--listen HOST:PORT` (an IPv6 host in brackets)."""
    host, sep, port = (value or "").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError([Problem("command line", None, "--listen", f"expected HOST:PORT (e.g. 0.0.0.0:8080), got {value!r}")])
    return host, int(port)


def cmd_shadow(a: argparse.Namespace) -> int:
    from qualitycheck.core._config_file import load_config
    from qualitycheck.shadow._proxy import AS_REQUESTED
    from qualitycheck.shadow._serve import run_shadow
    from qualitycheck.traffic._rules import load_rules

    host, port = _listen(a.listen)
    if not a.out:
        raise ConfigError([Problem("command line", None, "--out", "required: the run folder to record into")])
    overrides = config_overrides(vars(a), (*SHADOW_TARGET_OPTIONS, *SHADOW_OPTIONS))
    try:
        cfg = load_config(a.config, overrides)
    except ConfigError as exc:  # a target without a model forwards whatever model each caller names
        if a.model or not exc.problems or any(not p.field.endswith(".model") for p in exc.problems):
            raise
        cfg = load_config(a.config, {**overrides, "model": AS_REQUESTED})
    missing = [n for n in ("baseline", "candidate") if getattr(cfg, n) is None]
    if missing:
        raise ConfigError(
            [Problem(cfg.source or "command line", None, n, f"no {n} target (--{n} URL or `{n}:` in the config)") for n in missing]
        )
    return run_shadow(cfg, Path(a.out), load_rules(a.rules), host=host, port=port)


COMMANDS = {
    "run": cmd_run,
    "compare": cmd_compare,
    "validate": cmd_validate,
    "score": cmd_stage,
    "report": cmd_stage,
    "gate": cmd_stage,
    "preflight": cmd_preflight,
    "sweep": cmd_sweep,
    "demo": cmd_demo,
    "merge": cmd_merge,
    "shadow": cmd_shadow,
    "replay": cmd_replay,
    "likelihood": cmd_likelihood,
}
