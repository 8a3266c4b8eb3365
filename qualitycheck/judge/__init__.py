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
        JudgeCache as JudgeCache,
        JudgeDefinition as JudgeDefinition,
        injection_signals as injection_signals,
        judge_dirs as judge_dirs,
        load_judge_file as load_judge_file,
        load_judges as load_judges,
        neutralise as neutralise,
        score_judge as score_judge,
        validate_judge_checks as validate_judge_checks,
    )

_HOME = {
    "CACHE_NAME": "_judge",
    "JudgeCache": "_judge",
    "JudgeDefinition": "_judge",
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
