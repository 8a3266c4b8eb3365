"""The `preflight` and `sweep` subcommands (Contract 2); cli.py registers them.

Kept here so the command line of the serving part sits next to the code it
drives, and cli.py stays a list of thin commands. Heavy imports happen only
when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import ConfigError, Problem

__all__ = ["add_preflight_parser", "add_sweep_parser", "cmd_preflight", "cmd_sweep"]

EXIT_PASS, EXIT_FAIL, EXIT_INCOMPLETE = 0, 1, 3
ESSENTIAL_CHECKS = ("served_model", "tokenize")
"""Without these two answers nothing was proven: the command cannot say 'all match'."""


def add_preflight_parser(sub: Any) -> None:
    p = sub.add_parser("preflight", help="same model, chat template (/tokenize) and stop tokens on both servers? exit 0 yes, 1 no")
    p.add_argument("-c", "--config", help="config file (default: ./qualitycheck.yaml if present)")
    p.add_argument("--baseline", metavar="URL", help="baseline endpoint")
    p.add_argument("--candidate", metavar="URL", help="candidate endpoint")
    p.add_argument("--model", help="served model name for both targets")
    p.add_argument("--suite", action="append", metavar="PATH", help="suite file or folder (repeatable): every case is tokenized on both")
    p.add_argument("--json", action="store_true", help="print the structured record instead of lines")


def add_sweep_parser(sub: Any) -> None:
    p = sub.add_parser("sweep", help="the suite over several candidates (labelled by k) and concurrency levels")
    p.add_argument("-c", "--config", help="config file (default: ./qualitycheck.yaml if present)")
    p.add_argument("--baseline", metavar="URL", help="baseline endpoint (or --baseline-launch)")
    p.add_argument("--baseline-launch", metavar="TEMPLATE", help="command that starts the baseline server ({port}, {model})")
    p.add_argument("--candidate", action="append", default=[], metavar="K=URL", help="a running candidate labelled with its k (repeatable)")
    p.add_argument("--launch", metavar="TEMPLATE", help="command that starts a candidate ({k}, {port}, {model}); one per --k value")
    p.add_argument("--k", metavar="K,K,...", help="k values for --launch, e.g. 1,2,3,5,8")
    p.add_argument("--model", help="served model name")
    p.add_argument("--suite", action="append", metavar="PATH", help="suite file or folder (repeatable)")
    p.add_argument("--concurrency", default="1,4,8", metavar="N,N,...", help="concurrency levels. Default: %(default)r")
    p.add_argument("--out", help="output folder (default: reports/sweep-<timestamp>)")
    p.add_argument("--max-tokens", type=int, help="default max_tokens for cases that set none")
    p.add_argument("--repeats", type=int, help="answers per case per cell")
    p.add_argument("--timeout", type=float, help="seconds per request")


def _suites(a: argparse.Namespace, cfg: Any) -> list[str]:
    suites = a.suite or cfg.suites
    if not suites:
        raise ConfigError([Problem(cfg.source or "command line", None, "suites", "no suite given (--suite PATH or `suites:` in the config)")])
    return list(suites)


def cmd_preflight(a: argparse.Namespace) -> int:
    import json

    from qualitycheck.core._cases import load_suite
    from qualitycheck.core._config import load_config
    from qualitycheck.generation._preflight import format_preflight, run_preflight

    cfg = load_config(a.config, {"baseline.url": a.baseline, "candidate.url": a.candidate, "model": a.model})
    missing = [n for n in ("baseline", "candidate") if getattr(cfg, n) is None]
    if missing:
        raise ConfigError([Problem(cfg.source or "command line", None, f"--{m}", "required (a URL, with --model)") for m in missing])
    cases = load_suite(_suites(a, cfg))
    result = run_preflight(cfg.baseline, cfg.candidate, cases, concurrency=cfg.run.concurrency,  # type: ignore[arg-type]
                           timeout_s=min(cfg.run.timeout_s, 30.0))
    print(json.dumps(result.to_dict(), indent=2) if a.json else format_preflight(result))
    if not result.ok:
        return EXIT_FAIL
    unchecked = [c.name for c in result.checks if c.name in ESSENTIAL_CHECKS and c.passed is None]
    if unchecked:
        print(f"qualitycheck: preflight could not check {', '.join(unchecked)} (see above)", file=sys.stderr)
        return EXIT_INCOMPLETE
    return EXIT_PASS


def cmd_sweep(a: argparse.Namespace) -> int:
    import time

    from qualitycheck.core._cases import load_suite
    from qualitycheck.core._config import load_config
    from qualitycheck.pipeline._sweep import SweepCandidate, parse_candidate, parse_levels, print_table, run_sweep

    overrides = {"baseline.url": a.baseline, "model": a.model, "run.max_tokens": a.max_tokens,
                 "run.repeats": a.repeats, "run.timeout_s": a.timeout}
    cfg = load_config(a.config, overrides)
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
    cases = load_suite(_suites(a, cfg))
    out = Path(a.out) if a.out else Path("reports") / time.strftime("sweep-%Y%m%d-%H%M%S")
    result = run_sweep(cfg, cases, _suites(a, cfg), candidates, levels, out, baseline_template=a.baseline_launch, model=model)
    print_table(result)
    print(f"qualitycheck: sweep written to {out / 'sweep.json'} and {out / 'sweep.html'}", file=sys.stderr)
    return EXIT_PASS
