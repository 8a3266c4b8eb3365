"""Production traffic in: request logs read per format, redacted, turned into cases, sampled by stratum.

`qualitycheck replay` is built from these pieces, and the shadow proxy
reuses them per live request: `case_from_request` (one request → one case,
its category from the rules file and its checks from the request itself),
`Redactor` (typed placeholders, consistent within a conversation), the log
readers of `_formats`, and the sampler of `_sample`. The package sits just
above `core` and imports nothing else of qualitycheck.

Names are imported on first use, so reading a suite never pays for pandas
or the redaction patterns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._lazy import lazy_exports

if TYPE_CHECKING:
    from qualitycheck.traffic._formats import (
        Columns as Columns,
    )
    from qualitycheck.traffic._formats import (
        Logged as Logged,
    )
    from qualitycheck.traffic._formats import (
        LogSource as LogSource,
    )
    from qualitycheck.traffic._formats import (
        Request as Request,
    )
    from qualitycheck.traffic._formats import (
        detect as detect,
    )
    from qualitycheck.traffic._manifest import (
        ReplayManifest as ReplayManifest,
    )
    from qualitycheck.traffic._manifest import (
        read_replay_manifest as read_replay_manifest,
    )
    from qualitycheck.traffic._manifest import (
        replay_json_schema as replay_json_schema,
    )
    from qualitycheck.traffic._redact import (
        KINDS as KINDS,
    )
    from qualitycheck.traffic._redact import (
        Conversation as Conversation,
    )
    from qualitycheck.traffic._redact import (
        Redactor as Redactor,
    )
    from qualitycheck.traffic._replay import (
        ReplayOptions as ReplayOptions,
    )
    from qualitycheck.traffic._replay import (
        replay as replay,
    )
    from qualitycheck.traffic._rules import (
        Drafted as Drafted,
    )
    from qualitycheck.traffic._rules import (
        Rules as Rules,
    )
    from qualitycheck.traffic._rules import (
        case_from_request as case_from_request,
    )
    from qualitycheck.traffic._rules import (
        load_rules as load_rules,
    )
    from qualitycheck.traffic._sample import (
        DigestSet as DigestSet,
    )
    from qualitycheck.traffic._sample import (
        StratifiedSample as StratifiedSample,
    )
    from qualitycheck.traffic._sample import (
        Stratum as Stratum,
    )
    from qualitycheck.traffic._sample import (
        allocate as allocate,
    )

_HOME = {
    "Columns": "_formats",
    "LogSource": "_formats",
    "Logged": "_formats",
    "Request": "_formats",
    "detect": "_formats",
    "ReplayManifest": "_manifest",
    "read_replay_manifest": "_manifest",
    "replay_json_schema": "_manifest",
    "KINDS": "_redact",
    "Conversation": "_redact",
    "Redactor": "_redact",
    "ReplayOptions": "_replay",
    "replay": "_replay",
    "Drafted": "_rules",
    "Rules": "_rules",
    "case_from_request": "_rules",
    "load_rules": "_rules",
    "DigestSet": "_sample",
    "StratifiedSample": "_sample",
    "Stratum": "_sample",
    "allocate": "_sample",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_exports(__name__, _HOME)
