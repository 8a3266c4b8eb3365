"""LLM judges: definitions as files, both-order pairwise calls, rubric and reference modes, the cache.

Names are imported on first use, so importing one stage never pulls in the
heavy dependencies of another (scipy, jinja2, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.judge._judge import (
        CACHE_NAME as CACHE_NAME,
    )
    from qualitycheck.judge._judge import (
        JudgeCache as JudgeCache,
    )
    from qualitycheck.judge._judge import (
        JudgeDefinition as JudgeDefinition,
    )
    from qualitycheck.judge._judge import (
        JudgeOptions as JudgeOptions,
    )
    from qualitycheck.judge._judge import (
        injection_signals as injection_signals,
    )
    from qualitycheck.judge._judge import (
        judge_dirs as judge_dirs,
    )
    from qualitycheck.judge._judge import (
        load_judge_file as load_judge_file,
    )
    from qualitycheck.judge._judge import (
        load_judges as load_judges,
    )
    from qualitycheck.judge._judge import (
        neutralise as neutralise,
    )
    from qualitycheck.judge._judge import (
        score_judge as score_judge,
    )
    from qualitycheck.judge._judge import (
        validate_judge_checks as validate_judge_checks,
    )

_HOME = {
    "CACHE_NAME": "_judge",
    "JudgeCache": "_judge",
    "JudgeDefinition": "_judge",
    "JudgeOptions": "_judge",
    "injection_signals": "_judge",
    "judge_dirs": "_judge",
    "load_judge_file": "_judge",
    "load_judges": "_judge",
    "neutralise": "_judge",
    "score_judge": "_judge",
    "validate_judge_checks": "_judge",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
