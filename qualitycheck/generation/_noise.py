"""The default noise floor: ask the baseline again where the candidate's answer differs.

Greedy decoding is not deterministic under batching (bf16 numerics above
all), so a pass→fail flip between the baseline and the candidate may be the
baseline disagreeing with itself. Without a measured floor every such flip
counts as a regression: at 1% A/A disagreement a 300-case gate then fails
four runs in five with nothing wrong (`bench/gate_power.py`).

A case can only regress where the candidate's text differs from the
baseline's: identical answers score identically. So the baseline is asked
again for exactly those cases (repeat 0), stored as the `control` target: a
case whose baseline disagrees with itself is flaky, and the statistics
compare the regressions among the re-asked cases with the baseline's own
disagreements among them (`verdict._stats`, source `baseline_again`). With a
faithful candidate most answers are identical and the floor costs few
requests; where everything diverges it costs what a full control run costs.
`--control URL` or `--repeats N` measure the floor instead; `--no-noise-floor`
skips it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from qualitycheck.core._config import RunOptions, Target
from qualitycheck.core._records import NoiseFloorRecord
from qualitycheck.core._store import RunStore, StoredCases

if TYPE_CHECKING:  # the runner brings the HTTP stack, imported when the floor is asked for
    from qualitycheck.generation._runner import Progress, RunStats

__all__ = ["ask_baseline_again", "noise_floor_source"]


def noise_floor_source(targets: Mapping[str, Target], opts: RunOptions) -> str:
    """`control`, `repeats`, `baseline_again` or `none`: how a run of these targets and options measures its A/A noise floor."""
    if "control" in targets:
        return "control"
    if opts.repeats > 1:
        return "repeats"
    if opts.noise_floor == "none" or "baseline" not in targets:
        return "none"
    return "baseline_again"


def divergent_case_ids(store: RunStore) -> tuple[list[str], int]:
    """Ids of the greedy cases whose candidate text differs from the baseline's at repeat 0, and how many greedy cases both answered.

    Sampled cases are left out: their answers differ by design, and their
    own samples on both sides are the comparison (`verdict._sequential`).
    """
    ids: list[str] = []
    both = 0
    sampled = {c.id for c in store.iter_cases() if c.sampled}
    for cid, responses in store.responses_by_case():
        if cid in sampled:
            continue
        first = {r.target: r for r in responses if r.repeat == 0 and r.ok}
        b, c = first.get("baseline"), first.get("candidate")
        if b is None or c is None:
            continue
        both += 1
        if b.answer != c.answer:
            ids.append(cid)
    return ids, both


def ask_baseline_again(store: RunStore, baseline: Target, opts: RunOptions, *, progress: Progress | None = None) -> RunStats:
    """Send each divergent case to `baseline` once more (with the run's `opts`), stored as the `control` target.

    Resumable like generation: answers already stored are not asked again.
    Prints what it costs, and records it in the `noise_floor` artifact.
    """
    from qualitycheck.generation._runner import RunStats, generate

    ids, both = divergent_case_ids(store)
    total = store.case_count()
    store.put_record(NoiseFloorRecord(cases=len(ids), requests=len(ids), of_cases=both))
    share = f"{len(ids) / (2 * total):.0%}" if total else "0%"
    print(
        f"qualitycheck: noise floor: asking the baseline again for the {len(ids)} of {both} cases whose candidate "
        f"answer differs (+{len(ids)} requests, {share} of the run's; --no-noise-floor skips this)",
        file=sys.stderr,
    )
    if not ids:
        return RunStats()
    control = baseline.model_copy(update={"label": "baseline again"})
    once = opts.model_copy(update={"repeats": 1})
    return asyncio.run(generate(store, StoredCases(store, ids), {"control": control}, once, progress=progress))
