"""Stored baselines and stored runs: a side's answers taken from a run folder instead of asked again.

`qualitycheck run --baseline-run DIR` takes the baseline's answers and
samples from a stored run and asks only the candidate: five candidate
configurations tried against one baseline cost the baseline's GPUs once.
`qualitycheck compare RUN_A RUN_B --out DIR` gates two stored runs, RUN_A's
candidate as the baseline side and RUN_B's as the candidate, and asks
nothing at all.

Both copy what they take into the new run folder (responses under the
side's name; a stored baseline's likelihood records), so every later stage
(score, report, gate, a resume) reads one folder as always, and record where
the answers came from: `core.StoredAnswers`, and the manifest's `stored`
entry, which a resume must match.

Answers are only comparable when they answer the same requests of the same
model. So both refuse (exit 2, naming what differs) unless the suite
fingerprint, the repeats, the sampling design and the request options
match, every stored answer's request is the one this run would send
(`run`: its fingerprint built again), and the preflight profile the stored
run kept of its side matches the candidate's (`run`: the candidate asked
now; `compare`: both profiles as stored) on served model, weights, tokenizer
and chat template (`generation.IDENTITY_CHECKS`).

What a stored side cannot give is said, never guessed:

- **The A/A noise floor.** By default a run asks the baseline again where
  the candidate diverged. A stored baseline cannot be asked: the floor is
  the stored run's control or repeats when it had them, or its own re-asks
  when they cover every case where this candidate diverged; else it is not
  measured, and a route whose regressions it would have to weigh is
  undecided (`QualityEvidence.floor_missing`). A live baseline
  (`--baseline URL`) is asked every greedy case alongside the candidate, as
  a control: its answers against the stored ones are the floor's pairs.
- **Latency.** The stored answers were timed at another time and load, so
  the TPOT guardrail is not evaluated, unless a live baseline answered
  alongside: its TPOT is then compared with the candidate's on the requests
  both answered. The quality comparison always uses the stored answers (the
  reference every candidate tried against this baseline is held to); the
  live ones are the control.
- **Samples.** A sampling round copies as many baseline samples as it asks
  of the candidate; one that needs more than the stored run holds takes the
  rest from a live baseline, or else stops its category there
  (`StoredAnswers.short`), undecided if it is.

In `compare` the baseline side is RUN_A's candidate, which its run never
asked twice: the floor is its own repeats when the runs had `--repeats N`,
else not measured. The two candidates were timed in different runs, so
latency is not compared (each run's own summary compares its candidate
with its baseline).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from qualitycheck.core._cases import Case
from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import ConfigError, Problem, RunMismatchError
from qualitycheck.core._records import (
    LikelihoodStage,
    NoiseFloorRecord,
    PreflightRecord,
    Response,
    ServerProfile,
    StoredAnswers,
    StoredSide,
)
from qualitycheck.core._store import RunStore, StoredCases
from qualitycheck.generation._runner import Samples

__all__ = [
    "Source",
    "StoredBaseline",
    "copy_side",
    "design_problems",
    "open_baseline_run",
    "open_side",
    "option_problems",
    "refuse",
    "suite_problems",
]

_NAMED = 5
"""Cases a refusal names; the rest are counted."""
_COPY_BATCH = 2000
"""Responses copied per transaction."""


@dataclass
class Source:
    """One side of a stored run, opened for reading."""

    folder: Path
    store: RunStore
    side: Literal["baseline", "candidate"]
    target: Target
    """The side's endpoint as the stored run's manifest names it (never asked)."""
    cfg: Config
    """The stored run's config."""
    created_at: float

    @property
    def identity(self) -> StoredSide:
        return StoredSide(folder=str(self.folder), created_at=self.created_at, side=self.side, url=self.target.url, model=self.target.model)

    def profile(self) -> ServerProfile:
        """What the stored run's preflight recorded of this side's server; refused when it recorded nothing."""
        rec = self.store.record(PreflightRecord)
        prof = rec.profiles.get(self.side) if rec is not None else None
        if prof is None:
            why = (
                "it ran without preflight (--no-preflight)"
                if rec is None
                else "it was made before preflight kept what each server answered"
            )
            raise RunMismatchError(
                f"{self.folder}: the stored run recorded no preflight profile of its {self.side} ({why}), so nothing can be "
                f"checked against it; run it again with preflight on"
            )
        return prof


def open_side(folder: str | Path, side: Literal["baseline", "candidate"]) -> Source:
    path = Path(folder)
    store = RunStore.open(path)
    t = store.manifest.get("targets", {}).get(side)
    if not isinstance(t, dict) or not t.get("url"):
        store.close()
        raise RunMismatchError(f"{path}: the stored run has no {side} target")
    target = Target(url=t["url"], model=t["model"], extra_body=t.get("extra_body") or {}, label=t.get("label"))
    return Source(path, store, side, target, store.config(), float(store.meta("created_at") or 0.0))


def suite_problems(stored: Source, fingerprint: str, cases: Iterable[Case], what: str) -> list[str]:
    """The cases that differ between the stored run and `cases` (ids only on one side, content changed), named."""
    if stored.store.manifest.get("suite_fingerprint") == fingerprint:
        return []
    theirs = {c.id: c.content_hash() for c in stored.store.iter_cases()}
    ours: dict[str, str] = {c.id: c.content_hash() for c in cases}
    only_stored = sorted(theirs.keys() - ours.keys())
    only_ours = sorted(ours.keys() - theirs.keys())
    changed = sorted(i for i in ours.keys() & theirs.keys() if ours[i] != theirs[i])
    parts = [
        f"{label} {len(ids)} ({', '.join(ids[:_NAMED])}{', ...' if len(ids) > _NAMED else ''})"
        for label, ids in (("only in the stored run:", only_stored), (f"only in {what}:", only_ours), ("changed:", changed))
        if ids
    ]
    return [
        f"suite fingerprint differs ({len(theirs)} stored cases, {len(ours)} in {what}); cases " + "; ".join(parts or ["in order only"])
    ]


def design_problems(stored: Mapping[str, Any], opts: RunOptions, what: str) -> list[str]:
    """Repeats, sampling design and shard: what decides how many answers a case has and which cases a run holds."""
    now = {
        "repeats": opts.repeats,
        "sampling": opts.model_dump(include={"max_samples_per_case", "sample_round", "detectable_drop"}),
        "shard": opts.shard,
    }
    return [f"{key} differ: stored {stored.get(key)!r}, {what} {value!r}" for key, value in now.items() if stored.get(key) != value]


def option_problems(stored: RunOptions, opts: RunOptions, what: str) -> list[str]:
    from qualitycheck.generation._client import REQUEST_OPTIONS

    return [
        f"request option {name} differs: stored {getattr(stored, name)!r}, {what} {getattr(opts, name)!r}"
        for name in REQUEST_OPTIONS
        if getattr(stored, name) != getattr(opts, name)
    ]


def _request_problems(stored: Source, opts: RunOptions) -> list[str]:
    """Every stored answer of the side must answer the request this run would send its endpoint (fingerprint built again)."""
    from qualitycheck.generation._client import build_request

    problems = option_problems(stored.cfg.run, opts, "now")
    if problems:
        return problems
    differ, total, first = 0, 0, ""
    for rec in stored.store.by_case(scores=False):
        for r in rec.responses:
            if r.target != stored.side:
                continue
            total += 1
            if r.fingerprint != build_request(rec.case, stored.target, opts, r.repeat).fingerprint:
                differ += 1
                first = first or f"{r.case_id} repeat {r.repeat}"
    if differ:
        return [
            f"request parameters differ: {differ} of {total} stored {stored.side} answers were made with another request than "
            f"this run sends (first: {first}); the target's extra_body or the request format changed"
        ]
    return []


def refuse(folder: Path, what: str, problems: list[str]) -> None:
    if problems:
        raise RunMismatchError(f"qualitycheck: cannot take {what} from {folder}:\n  " + "\n  ".join(problems))


def print_preflight(result: Any, who: str) -> None:
    from qualitycheck.generation._preflight import format_preflight

    if not result.ok:
        print(f"qualitycheck: {who}: preflight found mismatches (the gate will report them):\n" + format_preflight(result), file=sys.stderr)


class StoredBaseline:
    """The baseline side of a run, taken from a stored run (`run --baseline-run DIR`): checked, then copied as rounds need it.

    Made by `open_baseline_run`, which refuses a stored run whose answers
    this run's could not be compared with. `targets` are the sides this run
    asks (the candidate; with a live baseline also `baseline`, for what the
    stored run lacks, and `control`).
    """

    def __init__(self, source: Source, candidate: Target, live: Target | None, preflight: PreflightRecord):
        self.source = source
        self.target = source.target
        """The stored baseline's endpoint: the manifest's baseline, and the prompt template's `extra_body`. Never asked."""
        self.live = live
        self.preflight = preflight
        self.answered = source.store.answered_repeats("baseline")
        """case id → the baseline samples the stored run holds without a gap."""
        self.targets: dict[str, Target] = {"candidate": candidate}
        if live is not None:
            self.targets = {"baseline": live, "candidate": candidate, "control": live.model_copy(update={"label": "live baseline"})}
        self.record = StoredAnswers(
            baseline=source.identity,
            live_baseline=live.public_url if live is not None else None,
            latency_missing=""
            if live is not None
            else f"the baseline's answers were timed by the stored run {source.folder} at another time and load; a live "
            "baseline (--baseline URL) answering alongside the candidate would measure it",
        )

    @property
    def manifest_targets(self) -> dict[str, Target]:
        """The sides the new run's answers come from, as its manifest names them: the stored baseline, the candidate, a live control."""
        out = {"baseline": self.target, "candidate": self.targets["candidate"]}
        if "control" in self.targets:
            out["control"] = self.targets["control"]
        return out

    @property
    def manifest_entry(self) -> dict[str, float]:
        """The manifest's `stored`: which stored run (by its start) the baseline came from; a resume must name the same."""
        return {"baseline": self.source.created_at}

    def begin(self, store: RunStore, cfg: Config) -> None:
        """Record the preflight against the stored profile and where the answers come from, before anything is asked."""
        from qualitycheck.pipeline._likelihood import likelihood_settings

        store.put_record(self.preflight)
        self._save(store)
        if likelihood_settings(cfg, self.target) is None:  # nothing may score: the stored baseline is never asked
            store.put_record(
                LikelihoodStage(
                    scorer="",
                    model=self.target.model,
                    evaluated=False,
                    reason=f"the baseline's answers are stored ({self.source.folder}) and nothing can score the candidate's under "
                    "the baseline model: give a live baseline (--baseline URL) or --scorer URL",
                    top_k=cfg.likelihood.top_k,
                    least_likely=cfg.likelihood.least_likely,
                )
            )

    def close(self) -> None:
        """Close the stored run's store (read only here)."""
        self.source.store.close()

    def _save(self, store: RunStore) -> None:
        store.put_record(self.record)

    def copy(self, store: RunStore, ids: Iterable[str] | None, samples: Samples) -> None:
        """Copy the stored baseline's answers of `ids` (all cases: None), each case's first `samples(case)` repeats, with
        their likelihood records where the new run has none (one a live scorer made stands)."""
        want = {c.id: samples(c) for c in StoredCases(store, ids)}
        copy_side(self.source, store, want)
        rows = []
        have: dict[tuple[str, int], Any] = {}
        case = None
        for lr, content in self.source.store.likelihood_rows():  # ordered by case
            n = want.get(lr.case_id)
            if n is None or lr.target != "baseline" or lr.repeat >= n:
                continue
            if lr.case_id != case:
                case, have = lr.case_id, store.likelihood_keys(lr.case_id)
            if ("baseline", lr.repeat) not in have:
                rows.append((lr, content))
        if rows:
            store.put_likelihoods(rows)

    def to_ask(self, ids: Iterable[str], done: int, need: int) -> int:
        """Baseline requests a round sends a live baseline: its cases' samples from `done` to `need` beyond what is stored."""
        if self.live is None:
            return 0
        return sum(max(0, need - max(done, self.answered.get(i, 0))) for i in ids)

    def can_sample(
        self, store: RunStore, undecided: Mapping[str, tuple[str, ...]], ids: Mapping[str, set[str]], need: int
    ) -> dict[str, tuple[str, ...]]:
        """The undecided categories a round of `need` samples per case can take: all with a live baseline; without one, those
        whose every sampled case has that many stored baseline samples. The others stop here (`StoredAnswers.short`)."""
        if self.live is not None:
            return dict(undecided)
        out: dict[str, tuple[str, ...]] = {}
        short = dict(self.record.short)
        for cat, checks in undecided.items():
            have = min((self.answered.get(i, 0) for i in ids.get(cat, ())), default=0)
            if have >= need:
                out[cat] = checks
                continue
            short[cat] = have
            print(
                f"qualitycheck: sampling: {cat} needs {need} samples per case; the stored baseline holds {have} and no live "
                "baseline (--baseline URL) was given, so its test stops here",
                file=sys.stderr,
            )
        if short != self.record.short:
            self.record = self.record.model_copy(update={"short": short})
            self._save(store)
        return out

    def settle_floor(self, store: RunStore, cfg: Config) -> None:
        """How this run's A/A floor is measured (see the module's docstring), copying the stored pairs it uses."""
        from qualitycheck.generation._noise import divergent_case_ids
        from qualitycheck.pipeline._likelihood import likelihood_pass

        src = self.source
        floor, missing = "", ""
        if self.live is not None:
            floor = (
                f"the live baseline {self.live.public_url} answered every greedy case alongside the candidate: its answers against "
                "the stored baseline's are the floor's pairs"
            )
        elif cfg.run.repeats > 1:
            floor = f"the stored baseline's own repeats ({src.folder})"
        elif cfg.run.noise_floor == "none":
            floor = "not asked for (--no-noise-floor): every pass→fail flip counts as a regression"
        elif "control" in src.store.manifest.get("targets", {}):
            copied = copy_side(src, store, None, target="control", as_target="control")
            floor = f"the stored run's control ({src.folder}, {copied} answers): its answers against the stored baseline's"
            likelihood_pass(store, cfg, baseline=self.target)
        else:
            ids, both = divergent_case_ids(store)
            default_floor = (
                src.store.record(NoiseFloorRecord) is not None
            )  # the stored run asked its baseline again where its candidate diverged
            asked_again = src.store.answered_repeats("control") if default_floor else {}
            uncovered = [i for i in ids if i not in asked_again]
            if not uncovered:
                copy_side(src, store, dict.fromkeys(ids, 1), target="control", as_target="control")
                store.put_record(NoiseFloorRecord(cases=len(ids), requests=0, of_cases=both))
                floor = (
                    f"the stored run ({src.folder}) asked its baseline again for every one of the {len(ids)} cases where this "
                    "candidate's answer differs"
                )
                likelihood_pass(store, cfg, case_ids=ids, baseline=self.target)
            elif default_floor:
                missing = (
                    f"the baseline's answers are stored ({src.folder}) and {len(uncovered)} of the {len(ids)} greedy cases where this "
                    f"candidate's answer differs were not asked again in it (e.g. {', '.join(uncovered[:_NAMED])}); a live baseline "
                    "(--baseline URL) would answer them"
                )
            else:
                missing = (
                    f"the baseline's answers are stored ({src.folder}), which measured no noise floor, and no live baseline "
                    f"(--baseline URL) was given to ask again where this candidate's answer differs ({len(ids)} greedy cases)"
                )
        self.record = self.record.model_copy(update={"floor": floor, "floor_missing": missing})
        self._save(store)


def copy_side(
    source: Source, store: RunStore, want: Mapping[str, int] | None, *, target: str | None = None, as_target: str = "baseline"
) -> int:
    """Copy `source`'s answers (of `target`, by default its side) into `store` as `as_target`: of the cases in `want`, each
    its first `want[case]` repeats (every case and repeat: None). Returns how many were copied.

    A success already in `store` is never replaced by a stored error
    (`RunStore.put_response`), so a resume or a later round copies again
    safely, and what a live baseline filled in stands.
    """
    name = target or source.side
    batch: list[Response] = []
    copied = 0
    for cid, responses in source.store.responses_by_case():
        n = want.get(cid) if want is not None else None
        if want is not None and n is None:
            continue
        for r in responses:
            if r.target == name and (n is None or r.repeat < n):
                batch.append(r if r.target == as_target else r.model_copy(update={"target": as_target}))
        if len(batch) >= _COPY_BATCH:
            store.put_responses(batch)
            copied += len(batch)
            batch = []
    store.put_responses(batch)
    return copied + len(batch)


def open_baseline_run(folder: str | Path, cfg: Config, fingerprint: str, cases: Iterable[Case], out: Path) -> StoredBaseline:
    """The stored run at `folder` as this run's baseline, or a refusal (exit 2) naming every way its answers differ.

    Sends nothing to the stored baseline: the candidate (and a live
    baseline) is asked the preflight's questions and checked against the
    profile the stored run kept of its baseline.
    """

    if cfg.control is not None:
        raise ConfigError(
            [
                Problem(
                    cfg.source or "command line",
                    None,
                    "control",
                    "not used with --baseline-run: a live baseline given as --baseline URL is asked every case as the control",
                )
            ]
        )
    if not cfg.run.preflight:
        raise ConfigError(
            [
                Problem(
                    "command line",
                    None,
                    "--no-preflight",
                    "a stored baseline is compared only with a candidate whose preflight matches the stored run's; "
                    "--no-preflight cannot be used with --baseline-run",
                )
            ]
        )
    assert cfg.candidate is not None
    path = Path(folder)
    if path.resolve() == out.resolve():
        raise RunMismatchError(f"--baseline-run and --out name the same folder ({path}); write the new run elsewhere")
    src = open_side(path, "baseline")
    try:
        return _checked(src, cfg, cfg.candidate, fingerprint, cases)
    except BaseException:
        src.store.close()
        raise


def _checked(src: Source, cfg: Config, candidate: Target, fingerprint: str, cases: Iterable[Case]) -> StoredBaseline:
    from qualitycheck.generation._preflight import check_against_profile, identity_problems, preflight_http

    path = src.folder
    problems = suite_problems(src, fingerprint, cases, "this suite")
    problems += design_problems(src.store.manifest, cfg.run, "now")
    if not problems:
        problems += _request_problems(src, cfg.run)
    live = cfg.baseline
    if live is not None:
        for key in ("model", "extra_body"):
            if getattr(live, key) != getattr(src.target, key):
                problems.append(
                    f"the live baseline's {key} differs from the stored baseline's: stored {getattr(src.target, key)!r}, "
                    f"--baseline {getattr(live, key)!r} (it answers what the stored one lacks, so its requests must be the same)"
                )
    refuse(path, "the baseline", problems)
    profile = src.profile()
    http = preflight_http(cfg.run)
    result = asyncio.run(check_against_profile(profile, candidate, cases, key_extra=src.target.extra_body, http=http))
    problems = [f"the candidate's preflight against the stored baseline: {p}" for p in identity_problems(result)]
    if live is not None:
        names = ("stored baseline", "live baseline")
        live_result = asyncio.run(check_against_profile(profile, live, cases, key_extra=src.target.extra_body, names=names, http=http))
        problems += [f"the live baseline's preflight against the stored baseline: {p}" for p in identity_problems(live_result)]
    refuse(path, "the baseline", problems)
    print_preflight(result, f"the candidate against the stored baseline of {path}")
    return StoredBaseline(src, candidate, live, result.to_record())
