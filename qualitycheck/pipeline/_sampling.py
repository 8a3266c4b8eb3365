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

With a stored baseline (`run --baseline-run`, `pipeline._stored`) each round
copies the baseline's samples from the stored run instead of asking for
them, as many as the round asks of the candidate: both sides then hold the
same samples of a case, as in a live run. A round that needs more samples
than the stored run holds takes the rest from a live baseline when one is
given; without one its category stops where the stored samples end, and
stays undecided if it is (said in the summary, never guessed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from qualitycheck.pipeline._stored import StoredBaseline

__all__ = ["first_round", "sample_in_rounds", "sampled_ids", "undecided_after"]


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


def undecided_after(store: RunStore, cfg: Config, design: Design, samples: int) -> tuple[dict[str, tuple[str, ...]], dict[str, set[str]]]:
    """The sampled categories still undecided on their first `samples` repeats (category → its undecided checks, before
    Holm: the rounds' rule), and each category's sampled case ids."""
    outcomes, ids, likelihood = _outcomes(store, samples)
    evidence = quality_evidence(
        outcomes,
        margins=cfg.non_inferiority_margin,
        design=design,
        describe=False,
        likelihood=likelihood,
        detectable_shift=cfg.likelihood.detectable_shift,
    )
    return dict(decide_quality(evidence, {}).undecided), ids


def sampled_ids(store: RunStore) -> set[str]:
    """The ids of the run's sampled cases."""
    return {c.id for c in store.iter_cases() if c.sampled}


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
    stored: StoredBaseline | None = None,
) -> RunStats:
    """Generate the first round for every case, then further rounds for the undecided sampled categories.

    Records the rounds (artifact `sampling`) after each one and prints what
    each costs. Returns the generation's counts; `interrupted` stops the
    rounds where they are (a rerun resumes them). With `stored`, the
    baseline's answers are copied from a stored run (see the module's
    docstring) and only the candidate (and a live baseline) is asked.
    """
    design = design_for(cfg.run)
    targets = cfg.targets() if stored is None else stored.targets
    keep = frozenset({"baseline"}) if stored is not None else frozenset()  # a stored baseline's answers stand
    template = stored.target if stored is not None else None
    if stored is not None:
        stored.copy(store, None, first_round(cfg))
    stats = measured_generate(
        store,
        StoredCases(store),
        targets,
        cfg.run,
        dcgm_url=cfg.canary.dcgm_metrics,
        progress=progress() if progress else None,
        http_clients=http_clients,
        samples=first_round(cfg),
        preflight=stored is None,  # a stored baseline's candidate was checked against its stored profile instead
        keep_stored=keep,
    )
    if not stats.interrupted:
        likelihood_pass(store, cfg, progress=progress, baseline=template)
    by_category: dict[str, int] = {}
    for c in store.iter_cases():
        if c.sampled:
            by_category[c.category] = by_category.get(c.category, 0) + 1
    sampled = sum(by_category.values())
    if not sampled:
        return stats
    first = design.looks[0]
    sides = 2 if stored is None else 1  # a sampled case is asked of the baseline and the candidate, never of the control
    rounds = [
        SamplingRoundRecord(
            round=1,
            samples_per_case=first,
            cases=sampled,
            categories=tuple(sorted(by_category)),
            requests=sampled * first * sides + (stored.to_ask(sampled_ids(store), 0, first) if stored is not None else 0),
        )
    ]
    store.put_record(_record(cfg, design, sampled, rounds))
    for k in range(1, len(design.looks)):
        if stats.interrupted:
            break
        undecided, ids = undecided_after(store, cfg, design, design.looks[k - 1])
        if not undecided:
            print(f"qualitycheck: sampling: every sampled category decided after {design.looks[k - 1]} samples per case", file=sys.stderr)
            break
        if stored is not None:  # without a live baseline, a category goes on only as far as the stored samples reach
            undecided = stored.can_sample(store, undecided, ids, design.looks[k])
            if not undecided:
                break
        asked = set().union(*(ids.get(cat, set()) for cat in undecided))
        more = design.looks[k] - design.looks[k - 1]
        requests = len(asked) * more * sides + (stored.to_ask(asked, design.looks[k - 1], design.looks[k]) if stored is not None else 0)
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
        if stored is not None:
            stored.copy(store, asked, _all_to(design.looks[k]))
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
            keep_stored=keep,
        )
        stats.add(more_stats)
        if not more_stats.interrupted:
            likelihood_pass(store, cfg, case_ids=asked, progress=progress, baseline=template)
    return stats
