"""The gate's false-alarm rate and power on simulated paired outcomes: one `name: value unit` line each.

    python bench/gate_power.py [--trials N]

A category of 300 cases (80% baseline pass rate), an A/A control, and a
share `noise` of A/A pairs that disagree (batching non-determinism). The
false-alarm rate is measured on A/A data (no change); the power is the share
of runs in which a 2-percentage-point regression fails the quality
guardrail. Both use the gate's own decision (qualitycheck.verdict._stats.classify_cases).
"""

from __future__ import annotations

import argparse

from qualitycheck.verdict._stats import ALPHA, simulate_gate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--cases", type=int, default=300)
    a = p.parse_args()
    print(f"gate_nominal_alpha: {ALPHA} share")
    for noise in (0.0, 0.005, 0.01, 0.02, 0.05):
        tag = f"n={a.cases},aa_disagreement={noise:.1%}"
        fa = simulate_gate(n=a.cases, noise=noise, drop=0.0, trials=a.trials, seed=1)
        pw = simulate_gate(n=a.cases, noise=noise, drop=0.02, trials=a.trials, seed=2)
        print(f"gate_false_alarm_rate[{tag}]: {fa:.4f} share")
        print(f"gate_power_2pp_regression[{tag}]: {pw:.4f} share")
    fa = simulate_gate(n=a.cases, noise=0.01, drop=0.0, trials=a.trials, seed=3, with_control=False)
    print(f"gate_false_alarm_rate[n={a.cases},aa_disagreement=1.0%,no_control]: {fa:.4f} share")


if __name__ == "__main__":
    main()
