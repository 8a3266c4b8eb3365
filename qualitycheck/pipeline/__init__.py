"""The order of the stages (run, finish, redo) and the jobs built from them: sweep, merge, demo.

Names are imported on first use, so importing one stage never pulls in the
heavy dependencies of another (scipy, jinja2, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.pipeline._demo import (
        DEMO_GUARDRAILS as DEMO_GUARDRAILS,
    )
    from qualitycheck.pipeline._demo import (
        default_suites as default_suites,
    )
    from qualitycheck.pipeline._demo import (
        demo_cases as demo_cases,
    )
    from qualitycheck.pipeline._demo import (
        run_demo as run_demo,
    )
    from qualitycheck.pipeline._demo import (
        write_suite as write_suite,
    )
    from qualitycheck.pipeline._merge import (
        merge_runs as merge_runs,
    )
    from qualitycheck.pipeline._run import (
        finish as finish,
    )
    from qualitycheck.pipeline._run import (
        manifest_for as manifest_for,
    )
    from qualitycheck.pipeline._run import (
        redo as redo,
    )
    from qualitycheck.pipeline._run import (
        run as run,
    )
    from qualitycheck.pipeline._run import (
        summarize as summarize,
    )
    from qualitycheck.pipeline._sweep import (
        SweepCandidate as SweepCandidate,
    )
    from qualitycheck.pipeline._sweep import (
        parse_candidate as parse_candidate,
    )
    from qualitycheck.pipeline._sweep import (
        parse_levels as parse_levels,
    )
    from qualitycheck.pipeline._sweep import (
        recommend as recommend,
    )
    from qualitycheck.pipeline._sweep import (
        render_html as render_html,
    )
    from qualitycheck.pipeline._sweep import (
        run_sweep as run_sweep,
    )

_HOME = {
    "DEMO_GUARDRAILS": "_demo",
    "SweepCandidate": "_sweep",
    "default_suites": "_demo",
    "demo_cases": "_demo",
    "finish": "_run",
    "manifest_for": "_run",
    "merge_runs": "_merge",
    "parse_candidate": "_sweep",
    "parse_levels": "_sweep",
    "recommend": "_sweep",
    "redo": "_run",
    "render_html": "_sweep",
    "run": "_run",
    "run_demo": "_demo",
    "run_sweep": "_sweep",
    "summarize": "_run",
    "write_suite": "_demo",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
