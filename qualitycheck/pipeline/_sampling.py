"""Sampled cases in rounds: more samples only for the categories whose pass rates are still undecided.

A sampled case (temperature > 0) is judged by its pass rate over several
samples per side (`verdict._sequential`). How many samples a category needs
depends on what it shows: a broken candidate is obvious after two samples
per case, a faithful one takes more to tell apart from a small drop. So the
first round asks every sampled case `sample_round` times per side, and each
later round asks the cases of the categories still undecided `sample_round`
more times, until every category decides or `max_samples_per_case` is
reached. The tests look after every round with group-sequential bounds, so
their error rates hold under this optional stopping.

Each round's decisions are a pure function of the samples stored up to it
(scored here in memory with the deterministic checks; the judge decides
afterwards), so a resumed run takes the same rounds, and the summary replays
the same looks. `--repeats N` fixes the number instead: one round of N.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from qualitycheck.core._cases import Case
from qualitycheck.core._config_file import Config
from qualitycheck.core._records import LikelihoodStage, SamplingRecord, SamplingRoundRecord
from qualitycheck.core._store import CaseRecords, RunStore, StoredCases
from qualitycheck.generation._measure import measured_generate
from qualitycheck.generation._runner import Progress, RunStats
from qualitycheck.pipeline._likelihood import likelihood_pass
from qualitycheck.scoring import score_case
from qualitycheck.verdict._compare import compare_case
from qualitycheck.verdict._decision import decide_quality, quality_evidence
from qualitycheck.verdict._likelihood import LikelihoodTally, ShiftCase
from qualitycheck.verdict._outcomes import CaseOutcome, add_case_outcomes
from qualitycheck.verdict._sequential import Design, design_for

__all__ = ["first_round", "sample_in_rounds"]


def first_round(cfg: Config) -> Callable[[Case], int]:
    """Repeats per case in the first round: `repeats` for greedy cases (and all cases when fixed), the first look for sampled ones."""
    if cfg.run.repeats > 1:
        return _all_to(cfg.run.repeats)
    first = design_for(cfg.run).looks[0]
    return lambda case: first if case.sampled else 1


def _all_to(samples: int) -> Callable[[Case], int]:
    return lambda case: samples


def _outcomes(
    store: RunStore, samples: int
) -> tuple[dict[str, dict[str, list[CaseOutcome]]], dict[str, set[str]], dict[str, list[ShiftCase]] | None]:
    """The sampled cases' outcomes on their first `samples` repeats, scored now, each category's sampled case ids, and
    their samples under the baseline model (None when the likelihood stage has not scored)."""
    outcomes: dict[str, dict[str, list[CaseOutcome]]] = {}
    ids: dict[str, set[str]] = {}
    likelihood = LikelihoodTally.for_stage(store.record(LikelihoodStage))
    for rec in store.by_case(scores=False, likelihoods=likelihood is not None):
        if not rec.case.sampled:
            continue
        ids.setdefault(rec.case.category, set()).add(rec.case.id)
        responses = [r for r in rec.responses if r.repeat < samples and r.target in ("baseline", "candidate")]
        if responses:
            scored = CaseRecords(rec.case, responses, score_case(rec.case, responses))
            comps = compare_case(scored)
            add_case_outcomes(outcomes, comps)
            if likelihood is not None:
                likelihood.add(CaseRecords(rec.case, responses, [], likelihoods=rec.likelihoods), comps)
    return outcomes, ids, likelihood.sampled if likelihood is not None else None


def _record(cfg: Config, design: Design, sampled: int, rounds: list[SamplingRoundRecord]) -> SamplingRecord:
    return SamplingRecord(
        mode="fixed" if cfg.run.repeats > 1 else "adaptive",
        max_samples_per_case=design.looks[-1],
        sample_round=cfg.run.sample_round,
        detectable_drop=design.drop,
        sampled_cases=sampled,
        rounds=tuple(rounds),
    )


def sample_in_rounds(
    store: RunStore,
    cfg: Config,
    *,
    progress: Callable[[], Progress] | None = None,
    http_clients: dict[str, Any] | None = None,
) -> RunStats:
    """Generate the first round for every case, then further rounds for the undecided sampled categories.

    Records the rounds (artifact `sampling`) after each one and prints what
    each costs. Returns the generation's counts; `interrupted` stops the
    rounds where they are (a rerun resumes them).
    """
    design = design_for(cfg.run)
    sides = 2  # a sampled case is asked of the baseline and the candidate, never of the control (`generation.work_items`)
    targets = cfg.targets()
    stats = measured_generate(
        store,
        StoredCases(store),
        targets,
        cfg.run,
        dcgm_url=cfg.canary.dcgm_metrics,
        progress=progress() if progress else None,
        http_clients=http_clients,
        samples=first_round(cfg),
    )
    if not stats.interrupted:
        likelihood_pass(store, cfg, progress=progress)
    by_category: dict[str, int] = {}
    for c in store.iter_cases():
        if c.sampled:
            by_category[c.category] = by_category.get(c.category, 0) + 1
    sampled = sum(by_category.values())
    if not sampled:
        return stats
    first = design.looks[0]
    rounds = [
        SamplingRoundRecord(
            round=1, samples_per_case=first, cases=sampled, categories=tuple(sorted(by_category)), requests=sampled * first * sides
        )
    ]
    store.put_record(_record(cfg, design, sampled, rounds))
    for k in range(1, len(design.looks)):
        if stats.interrupted:
            break
        outcomes, ids, likelihood = _outcomes(store, design.looks[k - 1])
        evidence = quality_evidence(
            outcomes,
            margins=cfg.non_inferiority_margin,
            design=design,
            describe=False,
            likelihood=likelihood,
            detectable_shift=cfg.likelihood.detectable_shift,
        )
        undecided = decide_quality(evidence, {}).undecided  # the cells still undecided before Holm: the rounds' rule
        if not undecided:
            print(f"qualitycheck: sampling: every sampled category decided after {design.looks[k - 1]} samples per case", file=sys.stderr)
            break
        asked = set().union(*(ids.get(cat, set()) for cat in undecided))
        more = design.looks[k] - design.looks[k - 1]
        requests = len(asked) * more * sides
        names = ", ".join(f"{cat} ({', '.join(checks)})" for cat, checks in sorted(undecided.items()))
        print(
            f"qualitycheck: sampling round {k + 1} of up to {len(design.looks)}: {len(asked)} of {sampled} sampled cases, "
            f"{more} more samples per side (+{requests} requests), for the undecided categories: {names}",
            file=sys.stderr,
        )
        rounds.append(
            SamplingRoundRecord(
                round=k + 1, samples_per_case=design.looks[k], cases=len(asked), categories=tuple(sorted(undecided)), requests=requests
            )
        )
        store.put_record(_record(cfg, design, sampled, rounds))
        more_stats = measured_generate(
            store,
            StoredCases(store, asked),
            targets,
            cfg.run,
            dcgm_url=cfg.canary.dcgm_metrics,
            progress=progress() if progress else None,
            http_clients=http_clients,
            samples=_all_to(design.looks[k]),
            preflight=False,
        )
        stats.add(more_stats)
        if not more_stats.interrupted:
            likelihood_pass(store, cfg, case_ids=asked, progress=progress)
    return stats
