"""The gate's false-alarm rate and power on simulated paired outcomes: one `name: value unit` line each.

    python bench/gate_power.py [--trials N]

First the headline figures `bench/run.py` prints (greedy routes against the
pooled floor, sampled categories in rounds: `figures_scoring.gate_power`),
then the greedy floor's designs across A/A disagreement rates:

A category of 300 cases (80% baseline pass rate) and a share of A/A pairs
that disagree (batching non-determinism). The false-alarm rate is measured
on A/A data (no change); the power is the share of runs in which a
2-percentage-point regression fails the quality guardrail. Both use the
gate's own decision (qualitycheck.verdict._decision.decide_quality).

The default configuration asks the baseline again for the cases whose
candidate text diverged (`baseline_again`). How many diverge besides the
noisy ones is a property of the deployment: `wording` is the share of cases
whose text varies under batching while their checks hold (0: only the
noisy cases diverge, the hardest case for this design). `--control` is the
baseline asked again for every case; `none` measures nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._simulate import simulate_gate
from bench.figures_scoring import gate_power
from qualitycheck.verdict._tests import ALPHA


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--cases", type=int, default=300)
    a = p.parse_args()
    print(f"gate_nominal_alpha: {ALPHA} share")

    def figure(name: str, value: float, unit: str = "", note: str = "") -> None:
        print(f"{name}: {value:.4f} {unit or 'share'}" + (f"  # {note}" if note else ""), flush=True)

    def skipped(name: str, why: str) -> None:
        print(f"{name}: skipped ({why})")

    gate_power(figure, skipped, a.trials)
    for design, wording in (("baseline_again", 0.0), ("baseline_again", 0.3), ("control", 0.0), ("none", 0.0)):
        label = "default" if design == "baseline_again" else design
        for noise in (0.0, 0.01, 0.02, 0.05):
            tag = f"{label},n={a.cases},aa_disagreement={noise:.0%}" + (f",wording={wording:.0%}" if design == "baseline_again" else "")
            fa = simulate_gate(n=a.cases, noise=noise, drop=0.0, trials=a.trials, seed=1, design=design, text_noise=wording)
            pw = simulate_gate(n=a.cases, noise=noise, drop=0.02, trials=a.trials, seed=2, design=design, text_noise=wording)
            print(f"gate_false_alarm_rate[{tag}]: {fa:.4f} share")
            print(f"gate_power_2pp_regression[{tag}]: {pw:.4f} share")


if __name__ == "__main__":
    main()
