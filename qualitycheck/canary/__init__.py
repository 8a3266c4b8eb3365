"""The canary watcher: the config's guardrails over a sliding window of live metrics, trips with hysteresis,
and the automatic fallback (`qualitycheck canary`). Imports `verdict` (the guardrail rules), `serving`
(acceptance definitions), `generation` (the /metrics reader), `pipeline` (the run summary) and `core`.

Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.canary._actions import ActionRunner as ActionRunner
    from qualitycheck.canary._record import CanaryRecord as CanaryRecord
    from qualitycheck.canary._record import canary_json_schema as canary_json_schema
    from qualitycheck.canary._sources import parse_page as parse_page
    from qualitycheck.canary._status import CanaryStatus as CanaryStatus
    from qualitycheck.canary._status import status_json_schema as status_json_schema
    from qualitycheck.canary._watch import Watcher as Watcher
    from qualitycheck.canary._watch import exit_code as exit_code
    from qualitycheck.canary._watch import rearm as rearm

_HOME = {
    "ActionRunner": "_actions",
    "CanaryRecord": "_record",
    "CanaryStatus": "_status",
    "Watcher": "_watch",
    "canary_json_schema": "_record",
    "exit_code": "_watch",
    "parse_page": "_sources",
    "rearm": "_watch",
    "status_json_schema": "_status",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
