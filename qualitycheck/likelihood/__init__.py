"""Every stored answer scored under the baseline model: the likelihood stage. Imports only `core`.

The baseline server (or a `--scorer` with its weights and no speculation)
is asked how likely it finds each answer, token by token, given its prompt
(`score_likelihoods`); the records (`core.LikelihoodRecord`, the store's
`likelihoods` table) and the stage's account (`core.LikelihoodStage`) are
the evidence the verdict reads. Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.likelihood._engines import (
        CannotScore as CannotScore,
    )
    from qualitycheck.likelihood._engines import (
        Scored as Scored,
    )
    from qualitycheck.likelihood._engines import (
        parse_sglang as parse_sglang,
    )
    from qualitycheck.likelihood._engines import (
        parse_vllm as parse_vllm,
    )
    from qualitycheck.likelihood._stage import (
        LikelihoodSettings as LikelihoodSettings,
    )
    from qualitycheck.likelihood._stage import (
        Progress as Progress,
    )
    from qualitycheck.likelihood._stage import (
        score_likelihoods as score_likelihoods,
    )

_HOME = {
    "CannotScore": "_engines",
    "LikelihoodSettings": "_stage",
    "Progress": "_stage",
    "Scored": "_engines",
    "parse_sglang": "_engines",
    "parse_vllm": "_engines",
    "score_likelihoods": "_stage",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
