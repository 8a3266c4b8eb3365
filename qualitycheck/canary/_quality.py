"""The quality guardrail of a window, from a live shadow or canary run folder (`--run DIR`).

The folder is summarised the way the offline verdict summarises any run
(`pipeline.summarize`: the comparison, the statistics with the noise floor,
and `verdict._status`'s decision of which cases are regressions); the window
then keeps the pairs whose two answers were both stored inside it, and the
regressions among them. The noise allowance of each cell is the one the
offline verdict measured on the whole folder, as `add_regression_evidence`
shares it out, so a window counts what the offline gate would count.

The folder must be scored (the shadow proxy's own summaries, or
`qualitycheck score DIR`): without scores no check is decided and the
guardrail is not evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from qualitycheck.core._config_file import Config
from qualitycheck.core._errors import QualitycheckError
from qualitycheck.core._store import RunStore
from qualitycheck.verdict._gate import Evidence

__all__ = ["QualityWindow", "quality_window"]


@dataclass
class QualityWindow:
    evidence: Evidence = field(default_factory=Evidence)
    pairs: dict[str, int] = field(default_factory=dict)
    """route → baseline/candidate pairs stored in the window."""
    error: str | None = None


def quality_window(run_dir: Path, cfg: Config, since: float, until: float) -> QualityWindow:
    """Regressions per route among the pairs stored in [since, until]; `error` says why nothing could be read."""
    from qualitycheck.pipeline._run import summarize

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
            summary = summarize(store, cfg)
    except QualitycheckError as exc:
        return QualityWindow(error=f"{run_dir}: {exc}")
    out = QualityWindow()
    for i in in_window:
        route = labels.get(i, ("", "default"))[1]
        out.pairs[route] = out.pairs.get(route, 0) + 1
    ev = out.evidence
    for cat_name, cat in summary.categories.items():
        if cat.checks:  # a check in the summary was decided on both sides for some case of the category
            ev.scored_routes |= {labels[i][1] for i in in_window if labels.get(i, ("", ""))[0] == cat_name}
        for name, check in cat.checks.items():
            window_regs = [i for i in check.regressions if i in in_window]
            by_route: dict[str, list[str]] = {}
            for i in window_regs:
                by_route.setdefault(labels[i][1], []).append(i)
            for route, ids in by_route.items():
                per = ev.regressions.setdefault(route, {})
                for i in ids:
                    per.setdefault(i, []).append(name)
                share = check.regression_allowance if len(by_route) == 1 else check.regression_allowance * len(ids) // len(window_regs)
                ev.allowances[route] = max(ev.allowances.get(route, 0), share)
    return out
