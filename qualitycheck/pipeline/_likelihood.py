"""Where a run asks for the likelihood stage: after each stretch of generation, on what it added.

A separate call from the generation rounds (`_sampling`) and the noise floor
(`_run`), so the order of the stages stays readable where it is decided and
the stage sees only its own settings (`likelihood.LikelihoodSettings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from qualitycheck.core._config import Config
from qualitycheck.core._store import RunStore

__all__ = ["likelihood_pass"]


def likelihood_pass(
    store: RunStore, cfg: Config, *, case_ids: Iterable[str] | None = None, progress: Callable[[], Any] | None = None
) -> None:
    """Score the answers of `case_ids` (all cases: None) that have no current record; nothing without a baseline.

    Switched off (`--no-likelihood`), it records the evidence as not
    evaluated. `progress` makes the progress display (generation's bars).
    """
    from qualitycheck.likelihood import LikelihoodSettings, score_likelihoods

    settings = LikelihoodSettings.from_config(cfg)
    if settings is not None:
        score_likelihoods(store, settings, case_ids=case_ids, progress=progress() if progress else None)
