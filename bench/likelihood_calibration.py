"""The likelihood cell's false alarms on real A/A data: each case's samples relabelled at random between the sides.

A run whose two sides serve one distribution (a second server of the same model, or the baseline as its own
candidate) holds, per sampled case, samples that are exchangeable between the sides and the rounds. Dealing them
at random within each case, each side keeping its count, gives runs that a faithful candidate could have produced
with these very score distributions (their skew, their spread between cases, the
few-sample variance estimates of the early looks) rather than the normal draws of `bench._simulate`. The share
of relabellings the product's `decide_shift` calls a shift is the cell's false-alarm rate on that data (a single
cell: before Holm), to hold against its alpha.

    python bench/likelihood_calibration.py RUN_DIR [RUN_DIR ...] [--trials N]

prints, per run and sampled category, the decision on the data as stored and the relabelled false-alarm rate.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qualitycheck.core._config import DEFAULT_SHIFT_NATS, RunOptions
from qualitycheck.core._records import LikelihoodStage
from qualitycheck.core._store import RunStore
from qualitycheck.verdict._likelihood import LikelihoodTally, ShiftCase, decide_shift
from qualitycheck.verdict._sequential import design_for


def sampled_cases(run: Path) -> dict[str, list[ShiftCase]]:
    """category → its sampled cases with every scored sample of both sides: what the decision's tally reads of the run."""
    with RunStore.open(run) as store:
        tally = LikelihoodTally.for_stage(store.record(LikelihoodStage))
        if tally is None:
            raise SystemExit(f"{run}: its likelihood stage did not score (`qualitycheck likelihood {run}` scores it)")
        for rec in store.by_case(scores=False, likelihoods=True):
            tally.add(rec, [])
    return tally.sampled


def relabelled(case: ShiftCase, rng: random.Random) -> ShiftCase:
    """The case's samples, both sides pooled, dealt at random to the sides and the rounds (each side keeps its count)."""
    pooled = [v for _, v in case.baseline] + [v for _, v in case.candidate]
    rng.shuffle(pooled)
    nb = len(case.baseline)
    b = tuple((rep, v) for (rep, _), v in zip(case.baseline, pooled[:nb], strict=True))
    c = tuple((rep, v) for (rep, _), v in zip(case.candidate, pooled[nb:], strict=True))
    return ShiftCase(case.case_id, case.route, b, c)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    design = design_for(RunOptions())
    for run in args.runs:
        for cat, cases in sampled_cases(run).items():
            samples = min(len(c.baseline) for c in cases)
            stored = decide_shift(design, DEFAULT_SHIFT_NATS, cases)
            rng = random.Random(args.seed)
            found = looks = 0
            for _ in range(args.trials):
                d = decide_shift(design, DEFAULT_SHIFT_NATS, [relabelled(c, rng) for c in cases])
                found += d.outcome == "shift"
                looks += d.look + 1
            print(
                f"{run.name}/{cat}: {len(cases)} cases x {samples} samples per side; as stored: {stored.outcome} "
                f"(p {stored.p_value:.3g}, look {stored.look + 1}); relabelled: shift in {found}/{args.trials} "
                f"= {found / args.trials:.4f} (alpha {design.alpha}), {looks / args.trials:.2f} looks on average",
                flush=True,
            )


if __name__ == "__main__":
    main()
