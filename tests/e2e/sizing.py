"""How large the sampled e2e runs must be: the figures their docstrings quote, from the gate's own test.

    python -m tests.e2e.sizing [--trials N]

Each sampled e2e test runs the group-sequential test of `verdict._sequential`
on real answers, so whether it decides is a matter of chance. This replays
that test (`verdict._stats.sampled_stats` at every look, the rounds of
`pipeline._sampling`: a category is asked again while any of its cells is
undecided; Holm across the run's cells afterwards) on outcomes drawn from
the per-case pass rates measured on this engine (docs/TESTING.md says when
and where), and prints how often each test's assertions hold at each budget
of samples per case. A test's budget is the least that holds its assertions
with probability at least `POWER`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from qualitycheck.core._config import RunOptions
from qualitycheck.verdict._sequential import design_for
from qualitycheck.verdict._stats import CaseOutcome, holm, sampled_stats

POWER = 0.99
"""How often a sized test must come out as its assertions expect."""

# Per-case rates measured on this engine (fp32 SmolLM2-135M-Instruct, vLLM 0.32 CPU, temperature 0.9;
# tests/e2e/suites/sampled.jsonl). JSON: (valid JSON and schema, valid JSON only) per case, pooled over both
# sides of the A/A run (the baseline server as its own candidate, 20 samples per case).
JSON_BASELINE = [
    (8, 4),
    (14, 1),
    (12, 3),
    (13, 1),
    (12, 2),
    (12, 5),
    (11, 5),
    (15, 2),
    (12, 0),
    (10, 3),
    (13, 4),
    (15, 2),
    (14, 1),
    (12, 2),
    (10, 4),
    (14, 2),
]
JSON_SAMPLES = 20
NGRAM_JSON = (0.0, 0.03)
"""The ngram candidate's JSON at 0.9 (schema, JSON only): 1 of 32 answers valid JSON, none to the schema."""
MATH_BASELINE = [0, 1, 2, 1, 3, 3, 0, 0, 0, 1, 0, 0]
MATH_SAMPLES = 6
NGRAM_MATH = 0.015
"""The ngram candidate's arithmetic at 0.9: 0 of 72 answers right here, 1-2% in docs/ENGINE.md's runs."""
GREEDY_JSON = [0] + [1] * 15
"""The baseline's greedy answers to the same JSON cases (temperature 0): valid and to the schema on 15 of 16."""
# The draft_model candidate (the model drafting for itself) against the baseline, 6 samples per case and side:
# (schema, JSON only) per case.
DRAFT_BASELINE = [
    (2, 2),
    (5, 0),
    (4, 1),
    (5, 0),
    (4, 2),
    (3, 1),
    (4, 0),
    (4, 0),
    (2, 0),
    (3, 1),
    (2, 1),
    (4, 0),
    (3, 1),
    (2, 2),
    (4, 0),
    (2, 0),
]
DRAFT_CANDIDATE = [
    (0, 0),
    (4, 0),
    (3, 0),
    (3, 0),
    (3, 0),
    (4, 0),
    (3, 1),
    (3, 1),
    (4, 1),
    (3, 1),
    (2, 1),
    (4, 1),
    (1, 0),
    (2, 2),
    (5, 0),
    (3, 0),
]
DRAFT_SAMPLES = 6


@dataclass(frozen=True)
class Cell:
    """A (category, check) of a sampled run: per case, the chance that one sample passes, on each side."""

    category: str
    check: str
    baseline: Sequence[float]
    candidate: Sequence[float]


@dataclass
class RunDraw:
    """One simulated run: each cell's decision, Holm p, pass rates and whether a case's baseline samples disagreed."""

    decision: dict[str, str]
    p_holm: dict[str, float]
    rates: dict[str, tuple[float, float]]
    flaky: dict[str, bool]
    samples: int


def json_cells(baseline: Sequence[tuple[int, int]], n: int, candidate: Sequence[tuple[float, float]]) -> tuple[Cell, Cell]:
    """json_parse and json_schema of the same answers (schema implies parse), from (schema, parse-only) counts of n."""
    b_schema = [s / n for s, _ in baseline]
    b_parse = [(s + p) / n for s, p in baseline]
    c_schema = [s for s, _ in candidate]
    c_parse = [s + p for s, p in candidate]
    return Cell("json", "json_parse", b_parse, c_parse), Cell("json", "json_schema", b_schema, c_schema)


def simulate(cells: Sequence[Cell], budget: int, trials: int, seed: int = 0, nested: bool = True, fixed: bool = False) -> list[RunDraw]:
    """`trials` runs of the cells with at most `budget` samples per case and side, rounds as the pipeline takes them
    (`fixed`: exactly `budget`, one look, as `--repeats budget` runs).

    With `nested`, cells of one category share each sample (a JSON answer valid to the schema is valid JSON):
    one uniform draw per sample decides every cell of the category, against its own rate.
    """
    design = design_for(RunOptions(repeats=budget) if fixed else RunOptions(max_samples_per_case=budget))
    rng = np.random.default_rng(seed)
    cats = sorted({c.category for c in cells})
    out = []
    for _ in range(trials):
        decisions: dict[str, str] = {}
        p: dict[str, float] = {}
        rates: dict[str, tuple[float, float]] = {}
        flaky: dict[str, bool] = {}
        spent = 0
        for cat in cats:
            mine = [c for c in cells if c.category == cat]
            k = len(mine[0].baseline)
            ub = rng.random((k, design.looks[-1]))
            uc = rng.random((k, design.looks[-1]))
            if not nested:
                ub2, uc2 = rng.random((len(mine), k, design.looks[-1])), rng.random((len(mine), k, design.looks[-1]))
            reps = tuple(range(design.looks[-1]))
            for n in design.looks:
                stats = {}
                for j, cell in enumerate(mine):
                    bu, cu = (ub, uc) if nested else (ub2[j], uc2[j])
                    b = bu < np.asarray(cell.baseline)[:, None]
                    c = cu < np.asarray(cell.candidate)[:, None]
                    outs = [
                        CaseOutcome(
                            f"{cat}{i}", cat, tuple(map(bool, b[i, :n])), tuple(map(bool, c[i, :n])), (), (), True, reps[:n], reps[:n]
                        )
                        for i in range(k)
                    ]
                    sp = sampled_stats(outs, design)
                    assert sp is not None
                    stats[cell.check] = (sp, b[:, :n], c[:, :n])
                if all(sp.decision.outcome != "undecided" for sp, _, _ in stats.values()) or n == design.looks[-1]:
                    break
            spent = max(spent, n)
            for check, (sp, b, c) in stats.items():
                decisions[check] = sp.decision.outcome
                p[check] = sp.decision.p_value if sp.decision.p_value is not None else 1.0
                rates[check] = (float(b.mean()), float(c.mean()))
                flaky[check] = bool(((b.sum(1) > 0) & (b.sum(1) < b.shape[1])).any())
        names = sorted(p)
        adjusted = holm([p[k] for k in names])  # the summary's Holm across the run's sampled cells
        out.append(
            RunDraw(decisions, {k: float(a if a is not None else 1.0) for k, a in zip(names, adjusted, strict=True)}, rates, flaky, spent)
        )
    return out


def share(draws: Sequence[RunDraw], holds: Callable[[RunDraw], bool]) -> float:
    return sum(holds(d) for d in draws) / len(draws)


def ngram_drop_found(d: RunDraw) -> bool:
    """test_1d's assertions on a run of the json and math cases against the ngram candidate."""
    return all(
        d.decision[k] == "drop" and d.p_holm[k] < 0.05 and d.rates[k][1] < 0.5 * d.rates[k][0]
        for k in ("json_parse", "json_schema", "regex")
    ) and (d.flaky["json_parse"] and d.flaky["regex"])


def strong_evidence(d: RunDraw) -> bool:
    """What the A/A assertion fails on: a Holm p below STRONG_EVIDENCE_P in any cell."""
    return min(d.p_holm.values()) < 1e-4


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--only", choices=("ngram", "aa", "draft"), action="append", help="one test's figures (repeatable)")
    args = parser.parse_args(argv)
    t = args.trials
    only = set(args.only or ("ngram", "aa", "draft"))
    base_json = json_cells(JSON_BASELINE, JSON_SAMPLES, [NGRAM_JSON] * len(JSON_BASELINE))
    math = Cell("math", "regex", [k / MATH_SAMPLES for k in MATH_BASELINE], [NGRAM_MATH] * len(MATH_BASELINE))
    if "ngram" in only:
        print(f"test_1d ngram at 0.9, json (16 cases) and math (12 cases): share of runs that hold every assertion ({t} runs each)")
        for budget in (2, 4, 6, 8, 10):
            draws = simulate([*base_json, math], budget, t)
            undecided = share(draws, lambda d: "undecided" in d.decision.values())
            print(
                f"  budget {budget:>2}: {share(draws, ngram_drop_found):.3f} (a cell undecided {undecided:.3f}), "
                f"mean samples per case {np.mean([d.samples for d in draws]):.1f}"
            )

    faithful = json_cells(JSON_BASELINE, JSON_SAMPLES, [(s / JSON_SAMPLES, p / JSON_SAMPLES) for s, p in JSON_BASELINE])
    greedy = [Cell(c.category, c.check, [float(g) for g in GREEDY_JSON], c.candidate) for c in faithful]
    if "aa" in only:
        print("test_1d A/A, json (16 cases): the faithful candidate failed (Holm p < 1e-4), and a comparison biased")
        print("  against the baseline's greedy answers (what the test guards against) caught, by budget")
        for fixed in (False, True):
            for budget in (2, 4, 6, 8, 10):
                print(
                    f"  {'--repeats' if fixed else 'budget'} {budget:>2}: "
                    f"faithful failed {share(simulate(faithful, budget, t, seed=1, fixed=fixed), strong_evidence):.4f}, "
                    f"biased caught {share(simulate(greedy, budget, t, seed=2, fixed=fixed), strong_evidence):.3f}"
                )
    if "draft" not in only:
        return 0

    b_draft = json_cells(DRAFT_BASELINE, DRAFT_SAMPLES, [(s / DRAFT_SAMPLES, p / DRAFT_SAMPLES) for s, p in DRAFT_CANDIDATE])
    print("test_2b draft_model at 0.9, json (16 cases), the loss measured here: share of runs deciding a drop / no drop / undecided")
    for budget in (2, 4, 6, 10):
        draws = simulate(b_draft, budget, t, seed=3)
        drop = share(draws, lambda d: "drop" in d.decision.values() and min(d.p_holm.values()) < 0.05)
        undecided = share(draws, lambda d: "undecided" in d.decision.values())
        print(f"  budget {budget:>2}: drop {drop:.3f}, undecided {undecided:.3f}")
    print("  the uniform loss (points of pass rate, both checks) a budget finds with probability at least POWER:")
    for budget in (2, 4, 6):
        found = None
        for loss in np.arange(0.10, 0.75, 0.05):
            cand = [(max(0.0, s / DRAFT_SAMPLES - loss), p / DRAFT_SAMPLES) for s, p in DRAFT_BASELINE]
            cells = json_cells(DRAFT_BASELINE, DRAFT_SAMPLES, cand)
            if share(simulate(cells, budget, max(200, t // 5), seed=4), lambda d: "drop" in d.decision.values()) >= POWER:
                found = loss
                break
        print(f"  budget {budget}: {f'{found:.2f}' if found is not None else 'none below 0.75'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
