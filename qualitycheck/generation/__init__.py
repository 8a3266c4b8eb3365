"""Talking to the endpoints under test: the streaming client, the paired runner, progress,
/metrics scrapes around generation and the preflight. Imports only `core`.

Names are imported on first use, so importing one stage never pulls in the
heavy dependencies of another (scipy, jinja2, aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.generation._client import (
        AnswerReader as AnswerReader,
    )
    from qualitycheck.generation._client import (
        Endpoint as Endpoint,
    )
    from qualitycheck.generation._client import (
        RequestPlan as RequestPlan,
    )
    from qualitycheck.generation._client import (
        build_request as build_request,
    )
    from qualitycheck.generation._measure import (
        measured_generate as measured_generate,
    )
    from qualitycheck.generation._measure import (
        preflight_into_store as preflight_into_store,
    )
    from qualitycheck.generation._metrics import (
        SentTally as SentTally,
    )
    from qualitycheck.generation._metrics import (
        parse_metrics as parse_metrics,
    )
    from qualitycheck.generation._metrics import (
        scrape as scrape,
    )
    from qualitycheck.generation._metrics import (
        scrape_all as scrape_all,
    )
    from qualitycheck.generation._metrics import (
        window as window,
    )
    from qualitycheck.generation._preflight import (
        Check as Check,
    )
    from qualitycheck.generation._preflight import (
        PreflightResult as PreflightResult,
    )
    from qualitycheck.generation._preflight import (
        format_preflight as format_preflight,
    )
    from qualitycheck.generation._preflight import (
        preflight as preflight,
    )
    from qualitycheck.generation._preflight import (
        run_preflight as run_preflight,
    )
    from qualitycheck.generation._progress import (
        RichProgress as RichProgress,
    )
    from qualitycheck.generation._runner import (
        Progress as Progress,
    )
    from qualitycheck.generation._runner import (
        RunStats as RunStats,
    )
    from qualitycheck.generation._runner import (
        generate as generate,
    )
    from qualitycheck.generation._runner import (
        in_shard as in_shard,
    )
    from qualitycheck.generation._runner import (
        work_items as work_items,
    )

_HOME = {
    "Check": "_preflight",
    "AnswerReader": "_client",
    "Endpoint": "_client",
    "PreflightResult": "_preflight",
    "Progress": "_runner",
    "RequestPlan": "_client",
    "RichProgress": "_progress",
    "RunStats": "_runner",
    "SentTally": "_metrics",
    "build_request": "_client",
    "format_preflight": "_preflight",
    "generate": "_runner",
    "in_shard": "_runner",
    "measured_generate": "_measure",
    "parse_metrics": "_metrics",
    "preflight": "_preflight",
    "preflight_into_store": "_measure",
    "run_preflight": "_preflight",
    "scrape": "_metrics",
    "scrape_all": "_metrics",
    "window": "_metrics",
    "work_items": "_runner",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
