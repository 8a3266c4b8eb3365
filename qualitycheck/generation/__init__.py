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
        Endpoint as Endpoint,
        RequestPlan as RequestPlan,
        build_request as build_request,
    )
    from qualitycheck.generation._measure import (
        PREFLIGHT_ARTIFACT as PREFLIGHT_ARTIFACT,
        measured_generate as measured_generate,
        preflight_into_store as preflight_into_store,
    )
    from qualitycheck.generation._metrics import (
        WINDOWS_ARTIFACT as WINDOWS_ARTIFACT,
        SentTally as SentTally,
        parse_metrics as parse_metrics,
        record_window as record_window,
        scrape as scrape,
        scrape_all as scrape_all,
        window as window,
    )
    from qualitycheck.generation._preflight import (
        Check as Check,
        PreflightResult as PreflightResult,
        format_preflight as format_preflight,
        preflight as preflight,
        run_preflight as run_preflight,
    )
    from qualitycheck.generation._progress import (
        RichProgress as RichProgress,
    )
    from qualitycheck.generation._runner import (
        Progress as Progress,
        RunStats as RunStats,
        generate as generate,
        in_shard as in_shard,
        work_items as work_items,
    )

_HOME = {
    "Check": "_preflight",
    "Endpoint": "_client",
    "PREFLIGHT_ARTIFACT": "_measure",
    "PreflightResult": "_preflight",
    "Progress": "_runner",
    "RequestPlan": "_client",
    "RichProgress": "_progress",
    "RunStats": "_runner",
    "SentTally": "_metrics",
    "WINDOWS_ARTIFACT": "_metrics",
    "build_request": "_client",
    "format_preflight": "_preflight",
    "generate": "_runner",
    "in_shard": "_runner",
    "measured_generate": "_measure",
    "parse_metrics": "_metrics",
    "preflight": "_preflight",
    "preflight_into_store": "_measure",
    "record_window": "_metrics",
    "run_preflight": "_preflight",
    "scrape": "_metrics",
    "scrape_all": "_metrics",
    "window": "_metrics",
    "work_items": "_runner",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
