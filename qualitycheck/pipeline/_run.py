"""The run from end to end, and the redo of a single stage from the store.

generate → score → compare/gate → summary.json → reports. Each stage reads
what the previous one stored; `score`, `report` and `gate` on a finished
run folder redo their part without calling an endpoint.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualitycheck.core._cases import Case, SuiteCases, scan_suite, suite_fingerprint
from qualitycheck.core._config import Target
from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import RunIncompleteError
from qualitycheck.core._process import few_collections
from qualitycheck.core._store import RunStore

if TYPE_CHECKING:
    from qualitycheck.verdict._compare import CaseConsumer, SplitTally
    from qualitycheck.verdict._model import Summary
    from qualitycheck.verdict._settings import VerdictSettings

__all__ = ["finish", "manifest_for", "redo", "run", "summarize", "verdict_settings"]

WALK_YOUNG_COLLECTION = 20_000
"""Containers between young collections while the store is walked: its records die by reference count (`few_collections`)."""

EXIT_FOR_VERDICT = {"pass": 0, "fail": 1, "inconclusive": 1}


def manifest_for(cases: Iterable[Case], cfg: Config, suites: list[str], *, targets: Mapping[str, Target] | None = None) -> dict[str, Any]:
    """The manifest of cases read in one pass (only their ids and content hashes are kept).

    `targets` are the sides the folder's answers come from, when not all of
    the config's (a shadow's control is its baseline asked again).
    """
    pairs = [(c.id, c.content_hash()) for c in cases]
    return _manifest(suite_fingerprint(pairs), len(pairs), cfg, suites, cfg.targets() if targets is None else targets)


def _manifest(fingerprint: str, count: int, cfg: Config, suites: list[str], targets: Mapping[str, Target]) -> dict[str, Any]:
    """What decides whether `--out` may be resumed (see store._manifest_diff)."""
    return {
        "suite_fingerprint": fingerprint,
        "suite_files": [str(s) for s in suites],
        "cases": count,
        "targets": {n: {**t.model_dump(include={"model", "label", "extra_body"}), "url": t.public_url} for n, t in targets.items()},
        "repeats": cfg.run.repeats,
        "sampling": cfg.run.model_dump(include={"max_samples_per_case", "sample_round", "detectable_drop"}),
        "shard": cfg.run.shard,
    }


def redacted_config(cfg: Config) -> dict[str, Any]:
    """The config as stored in the run folder: header values and keys never reach disk."""
    d = cfg.model_dump(mode="json", by_alias=True)
    for name in ("baseline", "candidate", "control", "judge"):
        t = d.get(name)
        if isinstance(t, dict):
            t["headers"] = {k: "<redacted>" for k in t.get("headers", {})}
            t["url"] = getattr(cfg, name).public_url
    return d


def run(cfg: Config, suites: list[str], out: Path, *, http_clients: dict[str, Any] | None = None) -> int:
    """Generate into `out` and finish the run there.

    The suite is never held: `scan_suite` validates it in one streaming pass
    (keeping ids and content hashes), and every later walk over the cases
    (judge checks, then into the store) reads it again lazily; generation
    reads the cases back from the store. Memory does not grow with the
    number of cases.
    """
    from qualitycheck.generation._noise import (  # the HTTP stack: only a run that generates pays for it
        ask_baseline_again,
        noise_floor_source,
    )
    from qualitycheck.generation._preflight import check_served_models
    from qualitycheck.generation._progress import RichProgress
    from qualitycheck.generation._runner import in_shard
    from qualitycheck.pipeline._likelihood import likelihood_pass
    from qualitycheck.pipeline._sampling import sample_in_rounds

    shard = cfg.run.shard
    scan = scan_suite(suites, keep=lambda c: in_shard(c.id, shard))
    cases = SuiteCases(suites, keep=lambda c: in_shard(c.id, shard), count=scan.count)
    if scan.judged or cfg.judges_dir:  # before any GPU time is spent
        from qualitycheck.judge._judge import judge_dirs, load_judges, validate_judge_checks

        dirs = judge_dirs(cfg.judges_dir, source=cfg.source or "config")  # a configured judges_dir must exist
        if scan.judged:  # definitions are parsed only for cases that name one, as score_judge does
            validate_judge_checks(cases, load_judges(dirs))
    if cfg.run.preflight:  # a model name a target does not serve: exit 2 before anything is sent
        check_served_models(cfg.targets(), source=cfg.source or "command line")
    store = RunStore.create(out, _manifest(scan.fingerprint, scan.count, cfg, suites, cfg.targets()), cases)
    try:
        store.put_artifact("config", redacted_config(cfg))
        if cfg.run.repeats > 1:
            each = f"{cfg.run.repeats} repeats"
        else:
            each = f"1 answer per greedy case, sampled cases in rounds of {cfg.run.sample_round} up to {cfg.run.max_samples_per_case}"
        print(f"qualitycheck: {scan.count} cases × {len(cfg.targets())} targets, {each} → {out}", file=sys.stderr)
        stats = sample_in_rounds(store, cfg, progress=RichProgress, http_clients=http_clients)
        if not stats.interrupted and cfg.baseline is not None and noise_floor_source(cfg.targets(), cfg.run) == "baseline_again":
            stats = ask_baseline_again(store, cfg.baseline, cfg.run, progress=RichProgress())
            if not stats.interrupted:
                likelihood_pass(store, cfg, progress=RichProgress)  # the baseline asked again: its divergences explained too
        if stats.interrupted:
            raise RunIncompleteError(f"interrupted; everything received is stored in {out}. Run the same command again to resume.")
        return finish(store, cfg)
    except KeyboardInterrupt:
        raise RunIncompleteError(f"interrupted; everything received is stored in {out}. Run the same command again to resume.") from None
    finally:
        store.close()


def finish(store: RunStore, cfg: Config | None = None, *, score: bool = True, report: bool = True) -> int:
    """Everything after generation, from the store alone: scores (unless `score=False`), summary.json,
    signoff.md, then report.html and the terminal summary (only the terminal summary when `report=False`).

    Scoring and the judge write their scores first (each its own pass, each
    replacing its scores in one transaction). Everything after reads the
    store in one walk (`build_summary`): each case is parsed once and handed
    to the comparison, the summary's tallies and, unless `report=False`, the
    report's row selection (`RowCollector`), whose ranking waits for the
    summary's statuses.
    """
    if score:
        from qualitycheck.generation._progress import RichProgress
        from qualitycheck.scoring import score_store

        score_store(store, progress=RichProgress())
        if cfg is not None:
            from qualitycheck.judge._judge import JudgeOptions, score_judge

            # after the deterministic scorers; cached calls; `skipped` without a judge
            opts = JudgeOptions.of_run(cfg.run, judges_dir=cfg.judges_dir, source=cfg.source)
            score_judge(store, cfg.judge, opts, progress=RichProgress())
    from qualitycheck.report import (  # scipy/statsmodels: imported after generation, not before the first request
        RowCollector,
        print_summary,
        publish,
    )
    from qualitycheck.report._signoff import write_signoff
    from qualitycheck.verdict._summary import write_summary

    with few_collections(WALK_YOUNG_COLLECTION):
        rows = RowCollector(store, max_cases=(cfg or Config()).run.report_max_cases) if report else None
        summary = summarize(store, cfg, also=[rows] if rows is not None else [])
        write_summary(store.folder, summary)
        write_signoff(store.folder, summary)
        if rows is not None:
            publish(store, summary, data=rows.result(summary))  # report.html + the terminal summary
        else:
            print_summary(summary)
    return EXIT_FOR_VERDICT[summary.verdict]


def summarize(store: RunStore, cfg: Config | None = None, *, also: Sequence[CaseConsumer | SplitTally] = ()) -> Summary:
    """summary.json as `finish` writes it, without writing anything: the verdict and its sign-off text.

    The sign-off is rendered here, by the layer above both the verdict and
    the reports: the verdict never imports the reports.
    """
    from qualitycheck.report._signoff import render_signoff
    from qualitycheck.verdict._summary import build_summary

    summary = build_summary(store, verdict_settings(cfg or Config()), also=also)
    summary.signoff = render_signoff(summary)
    return summary


def verdict_settings(cfg: Config) -> VerdictSettings:
    """What the verdict reads of the config: the guardrails in force, margins, seed, and the sampled design's drop."""
    from qualitycheck.verdict._likelihood import DivergenceRule
    from qualitycheck.verdict._settings import VerdictSettings

    return VerdictSettings(
        guardrails=cfg.guardrails,
        margins=dict(cfg.non_inferiority_margin),
        seed=cfg.run.seed,
        allow_not_evaluated=cfg.allow_not_evaluated,
        detectable_drop=cfg.run.detectable_drop,
        detectable_shift=cfg.likelihood.detectable_shift,
        divergence_rule=DivergenceRule(
            near_tie_nats=cfg.likelihood.near_tie_nats,
            decisive_nats=cfg.likelihood.decisive_nats,
            report_only=cfg.likelihood.divergence_report_only,
        ),
    )


def redo(folder: Path, stage: str, config_path: str | None, *, report_max_cases: int | None = None) -> int:
    """Redo `stage` and everything after it, with the run's own config unless another is given.

    `gate` re-gates only: summary.json, signoff.md and the terminal verdict;
    report.html stays as it is (`report` and `score` rebuild it).
    """
    from qualitycheck.core._config_file import load_config

    with RunStore.open(folder) as store:
        cfg = load_config(config_path) if config_path else store.config()
        if report_max_cases is not None:
            cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"report_max_cases": report_max_cases})})
        return finish(store, cfg, score=stage == "score", report=stage != "gate")
