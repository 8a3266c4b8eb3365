"""The quality guardrail of a window, from a live shadow or canary run folder (`--run DIR`).

The folder's evidence is gathered the way the offline verdict gathers any
run's (`verdict._summary.run_evidence`: the comparison, the statistics, the
pooled noise floor and each route's allowance against it); the window then
keeps the pairs whose two answers were both stored inside it, and the
regressions among them (`QualityEvidence.within`), weighed against the floor
and allowances measured on the whole folder. The decision is the offline
gate's own (`decide_quality`), so a window counts what the offline gate
would count: a regression the floor tolerates offline is tolerated here too.

The folder must be scored (the shadow proxy's own summaries, or
`qualitycheck score DIR`): without scores no check is decided and the
guardrail is not evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qualitycheck.core._errors import QualitycheckError
from qualitycheck.core._store import RunStore
from qualitycheck.verdict._gate import Evidence

if TYPE_CHECKING:
    from qualitycheck.verdict._settings import VerdictSettings

__all__ = ["QualityWindow", "quality_window"]


@dataclass
class QualityWindow:
    evidence: Evidence = field(default_factory=Evidence)
    pairs: dict[str, int] = field(default_factory=dict)
    """route → baseline/candidate pairs stored in the window."""
    error: str | None = None


def quality_window(run_dir: Path, settings: VerdictSettings, thresholds: Mapping[str, int], since: float, until: float) -> QualityWindow:
    """The quality guardrail of each route in `thresholds` over the pairs stored in [since, until]; `error` says why nothing could be read."""
    from qualitycheck.verdict._decision import decide_quality
    from qualitycheck.verdict._summary import run_evidence

    if not (run_dir / "run.sqlite").is_file():
        return QualityWindow(error=f"{run_dir}: no run.sqlite (not a run folder yet)")
    try:
        with RunStore.open(run_dir) as store:
            labels = store.case_labels()
            stored: dict[str, dict[str, float]] = {}
            for r in store.responses():
                if r.target in ("baseline", "candidate") and r.ok:
                    sides = stored.setdefault(r.case_id, {})
                    sides[r.target] = max(sides.get(r.target, 0.0), r.started_at)
            in_window = {i for i, sides in stored.items() if len(sides) == 2 and all(since <= t <= until for t in sides.values())}
            evidence = run_evidence(store, settings)
    except QualitycheckError as exc:
        return QualityWindow(error=f"{run_dir}: {exc}")
    out = QualityWindow()
    for i in in_window:
        route = labels.get(i, ("", "default"))[1]
        out.pairs[route] = out.pairs.get(route, 0) + 1
    decided = {cat for cat, cells in evidence.cells.items() if any(s.n for s in cells.values())}
    scored = {labels[i][1] for i in in_window if labels.get(i, ("", ""))[0] in decided}
    out.evidence = Evidence(quality=decide_quality(evidence.within(in_window, scored), thresholds))
    return out
