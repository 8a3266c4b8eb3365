"""Where a run asks for the likelihood stage: after each stretch of generation, on what it added.

A separate call from the generation rounds (`_sampling`) and the noise floor
(`_run`), so the order of the stages stays readable where it is decided and
the stage sees only its own settings (`likelihood.LikelihoodSettings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from qualitycheck.core._config_file import Config
from qualitycheck.core._store import RunStore

if TYPE_CHECKING:
    from qualitycheck.likelihood import LikelihoodSettings

__all__ = ["likelihood_pass", "likelihood_settings"]


def likelihood_settings(cfg: Config) -> LikelihoodSettings | None:
    """What the stage reads of a run's config; None when it has nothing to score with (no baseline and no scorer)."""
    import dataclasses

    from qualitycheck.likelihood import LikelihoodSettings

    opts = cfg.likelihood
    scorer = opts.scorer or cfg.baseline
    if scorer is None:
        return None
    return LikelihoodSettings(
        scorer=scorer,
        template_extra=dict(cfg.baseline.extra_body) if cfg.baseline is not None else {},
        enabled=opts.enabled,
        top_k=opts.top_k,
        least_likely=opts.least_likely,
        http=dataclasses.replace(cfg.run.http, concurrency=opts.concurrency or cfg.run.concurrency),
    )


def likelihood_pass(
    store: RunStore, cfg: Config, *, case_ids: Iterable[str] | None = None, progress: Callable[[], Any] | None = None
) -> None:
    """Score the answers of `case_ids` (all cases: None) that have no current record; nothing without a baseline.

    Switched off (`--no-likelihood`), it records the evidence as not
    evaluated. `progress` makes the progress display (generation's bars).
    """
    from qualitycheck.likelihood import score_likelihoods

    settings = likelihood_settings(cfg)
    if settings is not None:
        score_likelihoods(store, settings, case_ids=case_ids, progress=progress() if progress else None)
