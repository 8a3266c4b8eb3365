"""`qualitycheck compare RUN_A RUN_B --out DIR`: two stored runs gated against each other, nothing asked.

RUN_A's candidate is the baseline side and RUN_B's the candidate, with the
same statistics, guardrails and exit codes as a run (`finish`). The runs
must answer the same requests of the same model (`pipeline._stored`: suite,
repeats, sampling design, request options, and the two candidates'
preflight profiles as their runs stored them); anything else is refused
with exit 2, naming what differs.

What two stored runs cannot give is said, never guessed: the baseline side
was never asked twice in its run, so its noise floor is its own repeats
(runs made with `--repeats N`) or not measured, and a route whose
regressions it would weigh is undecided; the two candidates were timed in
different runs, so latency is not compared; a sampled category is tested at
the samples per case both runs hold, and stays undecided there if it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import RunMismatchError
from qualitycheck.core._records import (
    GpuSamples,
    LikelihoodStage,
    MetricsWindow,
    MetricsWindows,
    PreflightRecord,
    SamplingRecord,
    StoredAnswers,
)
from qualitycheck.core._store import RunStore, StoredCases
from qualitycheck.pipeline._stored import (
    Source,
    copy_side,
    design_problems,
    open_side,
    option_problems,
    print_preflight,
    refuse,
    suite_problems,
)
from qualitycheck.verdict._sequential import Design

__all__ = ["compare_runs"]


def _candidate_windows(store: RunStore) -> tuple[MetricsWindows, GpuSamples]:
    """A run's /metrics windows and GPU samples, of its candidate only (the other side's belong to another run)."""
    windows = [
        MetricsWindow(
            category=w.category,
            before={k: v for k, v in w.before.items() if k == "candidate"},
            after={k: v for k, v in w.after.items() if k == "candidate"},
            sent={k: v for k, v in w.sent.items() if k == "candidate"},
        )
        for w in store.record_or_empty(MetricsWindows).windows
    ]
    return MetricsWindows(windows=windows), GpuSamples(
        samples=[s for s in store.record_or_empty(GpuSamples).samples if s.side == "candidate"]
    )


def compare_runs(run_a: str | Path, run_b: str | Path, out: str | Path, config_path: str | None = None) -> int:
    """Gate RUN_B's candidate against RUN_A's candidate from their stored answers, into a new run folder `out`.

    Returns the verdict's exit code (`finish`); refuses (exit 2) runs whose
    answers cannot be compared, naming what differs. Nothing is asked of
    any target; a judge the config names judges the new pairs.
    """
    from qualitycheck.core._config_file import load_config
    from qualitycheck.generation._preflight import compare_profiles, identity_problems
    from qualitycheck.pipeline._run import manifest_of
    from qualitycheck.verdict._sequential import design_for

    out = Path(out)
    paths = [Path(run_a), Path(run_b)]
    if any(out.resolve() == p.resolve() for p in paths):
        raise RunMismatchError(f"{out} is one of the compared runs; write the comparison elsewhere")
    a, b = open_side(paths[0], "candidate"), open_side(paths[1], "candidate")
    try:
        if a.created_at == b.created_at:
            raise RunMismatchError(f"{paths[0]} and {paths[1]} are the same run; compare two runs")
        ma, mb = a.store.manifest, b.store.manifest
        problems = suite_problems(a, mb.get("suite_fingerprint", ""), StoredCases(b.store), str(paths[1]))
        problems += design_problems(ma, b.cfg.run, str(paths[1]))
        problems += option_problems(a.cfg.run, b.cfg.run, str(paths[1]))
        refuse(paths[0], f"the baseline side (its candidate) to compare with {paths[1]}", problems)
        key_extra = (ma.get("targets", {}).get("baseline") or {}).get("extra_body") or {}
        result = compare_profiles(a.profile(), b.profile(), StoredCases(a.store), key_extra=key_extra)
        bad = identity_problems(result)
        refuse(paths[0], f"the baseline side to compare with {paths[1]}", [f"the two candidates' preflight profiles: {p}" for p in bad])
        print_preflight(result, f"the candidates of {paths[0]} and {paths[1]}")
        # a given config brings its guardrails, routes and judge; the run's design (repeats, sampling, noise floor,
        # likelihood) is the stored runs': their answers were asked under it, and copying them reads it
        cfg = load_config(config_path).model_copy(update={"run": b.cfg.run, "likelihood": b.cfg.likelihood}) if config_path else b.cfg
        # the targets are the manifest's; none is asked (the config names no baseline, so nothing takes either candidate for a scorer)
        cfg = cfg.model_copy(update={"baseline": None, "candidate": None, "control": None})
        targets = {"baseline": a.target.model_copy(update={"label": a.target.label or f"candidate of {paths[0]}"}), "candidate": b.target}
        manifest = manifest_of(ma["suite_fingerprint"], int(ma.get("cases", 0)), cfg, list(ma.get("suite_files", [])), targets)
        manifest["stored"] = {"baseline": a.created_at, "candidate": b.created_at}
        store = RunStore.create(out, manifest, StoredCases(a.store))
        try:
            return _fill(store, cfg, a, b, result.to_record(), design_for(cfg.run))
        finally:
            store.close()
    finally:
        a.store.close()
        b.store.close()


def _fill(store: RunStore, cfg: Config, a: Source, b: Source, preflight: PreflightRecord, design: Design) -> int:
    """Copy both candidates' answers into the comparison's folder, say what is unmeasured, and finish the run there."""
    from qualitycheck.pipeline._run import finish, redacted_config
    from qualitycheck.pipeline._sampling import undecided_after

    store.put_artifact("config", redacted_config(cfg))
    store.put_record(preflight)
    windows, gpu = _candidate_windows(b.store)
    store.put_record(windows)
    if gpu.samples:
        store.put_record(gpu)
    # sampled cases: as many samples per case as both runs hold, at a look of the design, the same for a whole category
    have_a, have_b = a.store.answered_repeats("candidate"), b.store.answered_repeats("candidate")
    cases = list(StoredCases(store))
    per_cat: dict[str, int] = {}
    for c in cases:
        if c.sampled and cfg.run.repeats == 1:
            n = min(have_a.get(c.id, 0), have_b.get(c.id, 0))
            per_cat[c.category] = min(n, per_cat.get(c.category, n))
    looks = {cat: max((k for k in design.looks if k <= n), default=design.looks[0]) for cat, n in per_cat.items()}
    want = {c.id: looks[c.category] if c.sampled and c.category in looks else cfg.run.repeats for c in cases}
    copy_side(a, store, want)
    copy_side(b, store, want, as_target="candidate")
    short: dict[str, int] = {}
    for n in sorted(set(looks.values())):
        undecided, _ = undecided_after(store, cfg, design, n)
        short.update({cat: n for cat, k in looks.items() if k == n and cat in undecided and n < design.looks[-1]})
    if per_cat:
        store.put_record(
            SamplingRecord(
                mode="fixed" if cfg.run.repeats > 1 else "adaptive",
                max_samples_per_case=design.looks[-1],
                sample_round=cfg.run.sample_round,
                detectable_drop=design.drop,
                sampled_cases=sum(1 for c in cases if c.sampled),
            )
        )
    store.put_record(
        LikelihoodStage(
            scorer="",
            model=b.target.model,
            evaluated=False,
            reason="a comparison of stored runs: each run scored its answers against its own baseline's; "
            f"`qualitycheck likelihood {store.folder} --scorer URL` scores these pairs under the baseline model",
            top_k=cfg.likelihood.top_k,
            least_likely=cfg.likelihood.least_likely,
        )
    )
    if cfg.run.repeats > 1:
        floor, missing = f"the repeats of {a.folder}'s candidate (the baseline side): how often it disagrees with itself", ""
    elif cfg.run.noise_floor == "none":
        floor, missing = "not asked for (--no-noise-floor): every pass→fail flip counts as a regression", ""
    else:
        floor, missing = (
            "",
            (
                f"the baseline side is the candidate of {a.folder}, which its run never asked twice (only a baseline is asked again); "
                "runs made with --repeats N hold its own repeats"
            ),
        )
    store.put_record(
        StoredAnswers(
            baseline=a.identity,
            candidate=b.identity,
            floor=floor,
            floor_missing=missing,
            latency_missing=f"the two candidates were timed in different runs ({a.folder}, {b.folder}), at other times and loads; "
            "each run's own summary.json compares its candidate's TPOT with its baseline's",
            short=short,
        )
    )
    for cat, n in sorted(short.items()):
        print(
            f"qualitycheck: compare: {cat} is undecided at the {n} samples per case both runs hold; nothing is asked for more",
            file=sys.stderr,
        )
    print(f"qualitycheck: compare: {a.folder}'s candidate (baseline side) vs {b.folder}'s candidate → {store.folder}", file=sys.stderr)
    return int(finish(store, cfg))
