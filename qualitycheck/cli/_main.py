"""The `qualitycheck` command (Contract 2): its parser and the dispatch to `_commands`.

Exit codes: 0 verdict pass; 1 verdict fail or inconclusive; 2 usage, config
or suite error; 3 the run could not complete. Errors meant for the user are
printed as one clear message each, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys

from qualitycheck.cli._canary import cmd_canary
from qualitycheck.cli._commands import COMMANDS, EXIT_INCOMPLETE, EXIT_INPUT
from qualitycheck.cli._import import add_import_command, cmd_import
from qualitycheck.cli._options import (
    CANARY_COMMAND_OPTIONS,
    CI_OPTIONS,
    COMPARE_OPTIONS,
    LIKELIHOOD_OPTIONS,
    PREFLIGHT_OPTIONS,
    REPLAY_OPTIONS,
    REPORT_OPTIONS,
    RUN_OPTIONS,
    SHADOW_OPTIONS,
    SHADOW_TARGET_OPTIONS,
    STORED_BASELINE_OPTIONS,
    SWEEP_OPTIONS,
    TARGET_OPTIONS,
    add_options,
)
from qualitycheck.cli._review import add_review_command, cmd_review
from qualitycheck.core._errors import QualitycheckError

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]  # usage errors exit 2 with one line, as argparse does
        self.print_usage(sys.stderr)
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="qualitycheck",
        description="Paired quality, latency and acceptance checks of a speculative-decoding candidate against its baseline.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", help="generate, score, compare, gate and report")
    add_options(
        p.add_argument, (*TARGET_OPTIONS, *RUN_OPTIONS, *STORED_BASELINE_OPTIONS, *LIKELIHOOD_OPTIONS, *REPORT_OPTIONS, *CI_OPTIONS)
    )

    p = sub.add_parser(
        "compare",
        help="gate two stored runs: RUN_A's candidate as the baseline side, RUN_B's as the candidate (nothing is asked)",
    )
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    add_options(p.add_argument, (*COMPARE_OPTIONS, *CI_OPTIONS))

    p = sub.add_parser("validate", help="check suite files; lists every problem as path:line: field: message")
    p.add_argument("paths", nargs="+", metavar="PATH")

    for name, helptext in (
        ("score", "recompute every score from the stored responses"),
        ("report", "rebuild report.html (and summary/sign-off) from the store"),
        ("gate", "re-gate a stored run"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("dir", metavar="DIR")
        p.add_argument("-c", "--config", help="config with guardrails (default: the run's own)")
        add_options(p.add_argument, (*REPORT_OPTIONS, *CI_OPTIONS))

    p = sub.add_parser(
        "likelihood",
        help="score a stored run's answers under the baseline model (those not scored yet); exit 3 when it could not score them all",
    )
    p.add_argument("dir", metavar="DIR")
    p.add_argument("-c", "--config", help="config (default: the run's own)")
    add_options(p.add_argument, LIKELIHOOD_OPTIONS[:1])

    p = sub.add_parser("preflight", help="same model, chat template (/tokenize) and stop tokens on both servers? exit 0 yes, 1 no")
    add_options(p.add_argument, PREFLIGHT_OPTIONS)
    p.add_argument("--json", action="store_true", help="print the structured record instead of lines")

    p = sub.add_parser("sweep", help="the suite over several candidates (labelled by k) and concurrency levels")
    add_options(p.add_argument, SWEEP_OPTIONS)
    p.add_argument("--baseline-launch", metavar="TEMPLATE", help="command that starts the baseline server ({port}, {model})")
    p.add_argument("--candidate", action="append", default=[], metavar="K=URL", help="a running candidate labelled with its k (repeatable)")
    p.add_argument("--launch", metavar="TEMPLATE", help="command that starts a candidate ({k}, {port}, {model}); one per --k value")
    p.add_argument("--k", metavar="K,K,...", help="k values for --launch, e.g. 1,2,3,5,8")
    p.add_argument("--concurrency", default="1,4,8", metavar="N,N,...", help="concurrency levels. Default: %(default)r")
    p.add_argument("--out", help="output folder (default: reports/sweep-<timestamp>)")

    p = sub.add_parser("demo", help="the whole job on local vLLM (or llama.cpp) servers and the demo model (no GPU needed)")
    p.add_argument("--out", help="run folder (default: reports/demo-<timestamp>)")
    p.add_argument(
        "--engine",
        choices=("vllm", "llama.cpp"),
        default="vllm",
        help="vllm: fp32 baseline vs ngram k=3; llama.cpp: llama-server vs llama-server with the model as its own draft. Default: %(default)r",
    )

    p = sub.add_parser("merge", help="combine the run folders of --shard jobs into one run (same targets, disjoint cases)")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.add_argument("--out", required=True, metavar="DIR", help="new run folder for the merged run")

    p = sub.add_parser("replay", help="turn request logs (Batch API, request/response JSONL, CSV, Parquet) into a suite")
    p.add_argument(
        "logs", nargs="+", metavar="LOG", help="log files (gzip is read as such); Batch API output files are joined by custom_id"
    )
    add_options(p.add_argument, REPLAY_OPTIONS)

    p = sub.add_parser(
        "shadow",
        help="a proxy: callers get the baseline's answers, a sample is mirrored to the candidate and recorded "
        "(--sink: the target of a gateway's mirror instead)",
    )
    add_options(p.add_argument, (*SHADOW_TARGET_OPTIONS, *SHADOW_OPTIONS))

    p = sub.add_parser("canary", help="watch a live candidate against the guardrails; trip and fall back automatically")
    add_options(p.add_argument, CANARY_COMMAND_OPTIONS)

    add_review_command(sub)
    add_import_command(sub)

    p = sub.add_parser("schema", help="print the JSON Schema (Draft 2020-12) of a file qualitycheck writes")
    p.add_argument(
        "name",
        choices=("summary", "replay", "canary", "canary-status", "artifacts", "likelihoods"),
        help="summary: summary.json; replay: a replayed suite's replay.json; canary: a line of canary.jsonl; "
        "canary-status: the canary watcher's /qc/status; artifacts: the typed records a run folder's run.sqlite holds; "
        "likelihoods: a row of its likelihoods table",
    )

    return parser


def cmd_schema(a: argparse.Namespace) -> int:
    """Print the schema users validate their stored files against (docs/schema/ holds the same text)."""
    import json

    if a.name == "replay":
        from qualitycheck.traffic._manifest import replay_json_schema

        print(json.dumps(replay_json_schema(), indent=2))
        return 0
    if a.name == "artifacts":
        from qualitycheck.core._records import artifacts_json_schema

        print(json.dumps(artifacts_json_schema(), indent=2))
        return 0
    if a.name == "likelihoods":
        from qualitycheck.core._records import likelihoods_json_schema

        print(json.dumps(likelihoods_json_schema(), indent=2))
        return 0
    if a.name == "canary":
        from qualitycheck.canary._record import canary_json_schema

        print(json.dumps(canary_json_schema(), indent=2))
        return 0
    if a.name == "canary-status":
        from qualitycheck.canary._status import status_json_schema

        print(json.dumps(status_json_schema(), indent=2))
        return 0
    from qualitycheck.verdict._model import summary_json_schema

    print(json.dumps(summary_json_schema(), indent=2))
    return 0


COMMANDS["schema"] = cmd_schema
COMMANDS["review"] = cmd_review
COMMANDS["canary"] = cmd_canary
COMMANDS["import"] = cmd_import


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
