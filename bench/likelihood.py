"""The likelihood stage's figures, read from finished run folders: what it costs beside generation, and what it found.

    python bench/likelihood.py DIR [DIR ...]

Each DIR is a `qualitycheck run` folder against real servers (docs/PERFORMANCE.md,
"Likelihood stage", says which runs the published figures come from). Per
folder, one `name: value unit  # note` line per figure:

- `likelihood_share_of_generation`: the stage's seconds (all its passes) over
  generation's: the time at least one generation request was in flight (the
  union of every response's send-to-last-byte interval), so the stage's own
  passes between rounds are not counted as generation.
- `likelihood_prefilled_per_generated`: tokens the stage prefilled over the
  tokens generated (every stored answer's `completion_tokens`, all sides).
- `likelihood_mean_<category>_<side>`: the mean over that side's sampled
  answers of their mean log-probability per token under the baseline model
  (nats), with the number of answers.
- `likelihood_divergence_*`: every greedy answer that left the baseline's,
  with the rank and log-probability of its token, the baseline model's margin
  between its first choice and that token, and between its first two.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qualitycheck.core._records import LikelihoodStage  # noqa: E402  (the repository root is on the path now)
from qualitycheck.core._store import RunStore  # noqa: E402


def figure(name: str, value: Any, unit: str = "", note: str = "") -> None:
    if isinstance(value, float):
        value = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    print(f"{name}: {value}" + (f" {unit}" if unit else "") + (f"  # {note}" if note else ""), flush=True)


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def figures(folder: Path) -> None:
    with RunStore.open(folder) as store:
        stage = store.record(LikelihoodStage)
        if stage is None or not stage.evaluated:
            figure("likelihood_evaluated", "no", note=stage.reason if stage else "no likelihood stage in this run")
            return
        sampled = {c.id: c for c in store.iter_cases()}
        intervals, generated = [], 0
        for r in store.responses():
            if r.e2e_s is not None:
                intervals.append((r.started_at, r.started_at + r.e2e_s))
            generated += r.usage.completion_tokens or 0
        means: dict[tuple[str, str], list[float]] = {}
        divergences = []
        for rec in store.likelihoods():
            case = sampled[rec.case_id]
            if rec.status == "scored" and rec.mean_logprob is not None and case.sampled:
                means.setdefault((case.category, rec.target), []).append(rec.mean_logprob)
            if rec.divergence is not None:
                divergences.append((rec, case))
    gen_s = _busy_seconds(intervals)
    name = folder.name
    figure(
        "likelihood_share_of_generation",
        stage.seconds / gen_s,
        "x",
        f"{name}: {stage.seconds:.1f} s over {len(stage.passes)} passes, generation {gen_s:.1f} s; "
        f"{sum(p.requests for p in stage.passes)} prefills for {stage.scored} answers ({sum(p.reused for p in stage.passes)} copied)",
    )
    figure(
        "likelihood_prefilled_per_generated",
        stage.prefilled_tokens / generated if generated else float("nan"),
        "x",
        f"{name}: {stage.prefilled_tokens:,} tokens prefilled, {generated:,} generated",
    )
    for (category, side), values in sorted(means.items()):
        figure(
            f"likelihood_mean_{category}_{side}",
            statistics.fmean(values),
            "nats/token",
            f"{name}: {len(values)} sampled answers; median {statistics.median(values):.2f}",
        )
    figure("likelihood_divergences", len(divergences), note=f"{name}: greedy answers that left the baseline's (candidate and control)")
    for rec, case in divergences:
        d = rec.divergence
        assert d is not None
        tok = d.answer_token
        shown = "its answer ended" if tok is None else f"token {tok.text!r} rank {tok.rank} logprob {tok.logprob:.3f}"
        base = d.baseline_token
        was = "ended" if base is None else f"{base.text!r} {base.logprob:.3f}"
        margin = "" if d.margin is None else f"; margin {d.margin:.3f}"
        runner = "" if d.runner_up_margin is None else f"; first two {d.runner_up_margin:.3f} apart"
        figure(
            f"likelihood_divergence_{rec.target}",
            d.position,
            "th token",
            f"{name}: {case.id}: {shown} (the baseline's: {was}){margin}{runner}",
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        figures(Path(arg))
