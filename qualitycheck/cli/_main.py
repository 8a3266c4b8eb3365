"""The `qualitycheck` command: thin wrappers over the stages (Contract 2).

Exit codes: 0 verdict pass; 1 verdict fail or inconclusive; 2 usage, config
or suite error; 3 the run could not complete. Errors meant for the user are
printed as one clear message each, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import ConfigError, Problem, QualitycheckError
from qualitycheck.cli._serving import add_preflight_parser, add_sweep_parser, cmd_preflight, cmd_sweep

__all__ = ["main"]

EXIT_PASS, EXIT_FAIL, EXIT_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with one line, as argparse does
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message}\n")


def _target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", help="config file (default: ./qualitycheck.yaml if present)")
    p.add_argument("--baseline", metavar="URL", help="baseline endpoint (OpenAI-compatible base URL)")
    p.add_argument("--candidate", metavar="URL", help="speculative candidate endpoint")
    p.add_argument("--control", metavar="URL", help="second baseline for the A/A noise floor")
    p.add_argument("--model", help="served model name for every target without its own")
    p.add_argument("--suite", action="append", metavar="PATH", help="suite file or folder (repeatable)")


def _report_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report-max-cases", type=int, metavar="N",
                   help="cases report.html embeds in full, regressions and errors first (default 5000; all stay in the store)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="qualitycheck", description="Paired quality, latency and acceptance checks of a speculative-decoding candidate against its baseline.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", help="generate, score, compare, gate and report")
    _target_flags(p)
    p.add_argument("--out", help="run folder (default: reports/<timestamp>); an existing run of the same suites and targets is resumed")
    p.add_argument("--concurrency", type=int, help="requests in flight per target")
    p.add_argument("--repeats", type=int, help="answers per case and target (for sampled cases and the noise floor)")
    p.add_argument("--timeout", type=float, help="seconds per request")
    p.add_argument("--retries", type=int, help="retries per request on 429/5xx/timeouts/resets")
    p.add_argument("--max-tokens", type=int, help="default max_tokens for cases that set none")
    p.add_argument("--seed", type=int, help="seed for the statistics (bootstrap)")
    p.add_argument("--judge", metavar="URL", help="judge endpoint (OpenAI-compatible)")
    p.add_argument("--judge-model", metavar="NAME", help="judge model name")
    p.add_argument("--shard", metavar="I/N", help="run only shard I of N (stable hash of case ids)")
    p.add_argument("--no-preflight", action="store_true", help="skip the model/template/stop-token preflight")
    p.add_argument("--acceptance-by-category", action="store_true", help="run categories one after another and scrape /metrics between them")
    p.add_argument("--no-stream", action="store_true", help="non-streaming requests (no TTFT/ITL)")
    _report_flags(p)

    p = sub.add_parser("validate", help="check suite files; lists every problem as path:line: field: message")
    p.add_argument("paths", nargs="+", metavar="PATH")

    for name, helptext in (("score", "recompute every score from the stored responses"),
                           ("report", "rebuild report.html (and summary/sign-off) from the store"),
                           ("gate", "re-gate a stored run")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("dir", metavar="DIR")
        p.add_argument("-c", "--config", help="config with guardrails (default: the run's own)")
        _report_flags(p)

    add_preflight_parser(sub)
    add_sweep_parser(sub)

    p = sub.add_parser("demo", help="the whole job on local vLLM servers and the demo model (no GPU needed)")
    p.add_argument("--out", help="run folder (default: reports/demo-<timestamp>)")

    p = sub.add_parser("merge", help="combine the run folders of --shard jobs into one run (same targets, disjoint cases)")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.add_argument("--out", required=True, metavar="DIR", help="new run folder for the merged run")

    return parser


def _run_overrides(a: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {
        "baseline.url": a.baseline, "candidate.url": a.candidate, "control.url": a.control,
        "model": a.model,
    }
    for flag, key in (("concurrency", "run.concurrency"), ("repeats", "run.repeats"), ("timeout", "run.timeout_s"),
                      ("retries", "run.retries"), ("max_tokens", "run.max_tokens"), ("seed", "run.seed"),
                      ("shard", "run.shard"), ("report_max_cases", "run.report_max_cases")):
        o[key] = getattr(a, flag, None)
    if getattr(a, "judge", None):
        o["judge.url"] = a.judge
        o["judge.model"] = a.judge_model or a.model
    if getattr(a, "no_preflight", False):
        o["run.preflight"] = False
    if getattr(a, "acceptance_by_category", False):
        o["run.acceptance_by_category"] = True
    if getattr(a, "no_stream", False):
        o["run.stream"] = False
    return o


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
    from qualitycheck.core._config import load_config
    from qualitycheck.pipeline._run import run

    cfg = load_config(a.config, _run_overrides(a))
    if a.shard:
        _check_shard(a.shard)
    missing = [n for n in ("baseline", "candidate") if getattr(cfg, n) is None]
    if missing:
        raise ConfigError([Problem(cfg.source or "command line", None, n, f"no {n} target (--{n} URL or `{n}:` in the config)") for n in missing])
    suites = a.suite or cfg.suites
    if not suites:
        raise ConfigError([Problem(cfg.source or "command line", None, "suites", "no suite given (--suite PATH or `suites:` in the config)")])
    out = Path(a.out) if a.out else Path("reports") / time.strftime("%Y%m%d-%H%M%S")
    return run(cfg, suites, out)


def _check_shard(s: str) -> None:
    try:
        i, n = (int(x) for x in s.split("/"))
        ok = 1 <= i <= n
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError([Problem("command line", None, "--shard", f"expected I/N with 1 <= I <= N, got {s!r}")])


def cmd_stage(a: argparse.Namespace) -> int:
    from qualitycheck.pipeline._run import redo

    if a.report_max_cases is not None and a.report_max_cases < 1:
        raise ConfigError([Problem("command line", None, "--report-max-cases",
                                   f"expected a whole number of at least 1, got {a.report_max_cases}")])
    return redo(Path(a.dir), a.command, a.config, report_max_cases=a.report_max_cases)


def cmd_demo(a: argparse.Namespace) -> int:
    from qualitycheck.pipeline._demo import run_demo

    return run_demo(Path(a.out) if a.out else None)


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "score": cmd_stage, "report": cmd_stage, "gate": cmd_stage,
            "demo": cmd_demo}

COMMANDS.update({"preflight": cmd_preflight, "sweep": cmd_sweep})


def cmd_merge(a: argparse.Namespace) -> int:
    from qualitycheck.pipeline._merge import merge_runs

    return merge_runs(a.dirs, a.out)


COMMANDS["merge"] = cmd_merge


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except QualitycheckError as exc:
        print(f"qualitycheck: {exc}" if "\n" not in str(exc) else str(exc), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("qualitycheck: interrupted", file=sys.stderr)
        return EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
