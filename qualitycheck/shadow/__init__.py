"""Shadow traffic: a proxy that answers from the baseline and records the candidate (`qualitycheck shadow`).

Callers talk to the proxy as to the baseline and get exactly the baseline's
answers (or, with `--sink`, a gateway in front of production mirrors their
requests here and the sink asks both targets itself); a sampled share of chat and completions requests is mirrored to the
candidate at the same time, and each pair is stored as a case with both
answers in a run folder that `score`, `report`, `gate` and `merge` read as
any run. Cases come from replay's rules and request-derived checks
(`traffic`), answers are parsed and timed by the client's own reader
(`generation`), and a stopped proxy summarises its folder with the pipeline's
`finish`, so the package sits just below `cli`.

Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.shadow._proxy import (
        AS_REQUESTED as AS_REQUESTED,
    )
    from qualitycheck.shadow._proxy import (
        ShadowProxy as ShadowProxy,
    )
    from qualitycheck.shadow._recorder import (
        Recorder as Recorder,
    )
    from qualitycheck.shadow._serve import (
        run_shadow as run_shadow,
    )
    from qualitycheck.shadow._sink import (
        ShadowSink as ShadowSink,
    )
    from qualitycheck.shadow._tally import (
        ShadowDrain as ShadowDrain,
    )
    from qualitycheck.shadow._tally import (
        ShadowMetrics as ShadowMetrics,
    )
    from qualitycheck.shadow._tally import (
        ShadowPeriod as ShadowPeriod,
    )

_HOME = {
    "AS_REQUESTED": "_proxy",
    "ShadowProxy": "_proxy",
    "Recorder": "_recorder",
    "run_shadow": "_serve",
    "ShadowSink": "_sink",
    "ShadowDrain": "_tally",
    "ShadowMetrics": "_tally",
    "ShadowPeriod": "_tally",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
