"""The records every stage shares: errors, cases and suites, config, responses and scores, the run store,
and the one HTTP layer. The lowest layer: it imports no other qualitycheck package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._cases import (
    Case as Case,
)
from qualitycheck.core._cases import (
    SuiteCases as SuiteCases,
)
from qualitycheck.core._cases import (
    SuiteScan as SuiteScan,
)
from qualitycheck.core._cases import (
    iter_suite as iter_suite,
)
from qualitycheck.core._cases import (
    load_suite as load_suite,
)
from qualitycheck.core._cases import (
    scan_suite as scan_suite,
)
from qualitycheck.core._cases import (
    suite_files as suite_files,
)
from qualitycheck.core._cases import (
    suite_fingerprint as suite_fingerprint,
)
from qualitycheck.core._checks import (
    ENTRY_POINT_GROUP as ENTRY_POINT_GROUP,
)
from qualitycheck.core._checks import (
    CheckFamily as CheckFamily,
)
from qualitycheck.core._checks import (
    CheckFamilyError as CheckFamilyError,
)
from qualitycheck.core._checks import (
    CheckRegistry as CheckRegistry,
)
from qualitycheck.core._checks import (
    Checks as Checks,
)
from qualitycheck.core._checks import (
    CheckSpec as CheckSpec,
)
from qualitycheck.core._checks import (
    LoadContext as LoadContext,
)
from qualitycheck.core._checks import (
    check_registry as check_registry,
)
from qualitycheck.core._config import (
    JudgeTarget as JudgeTarget,
)
from qualitycheck.core._config import (
    RunOptions as RunOptions,
)
from qualitycheck.core._config import (
    Target as Target,
)
from qualitycheck.core._config_file import (
    DEFAULT_CONFIG_NAME as DEFAULT_CONFIG_NAME,
)
from qualitycheck.core._config_file import (
    Config as Config,
)
from qualitycheck.core._config_file import (
    load_config as load_config,
)
from qualitycheck.core._errors import (
    ConfigError as ConfigError,
)
from qualitycheck.core._errors import (
    InputError as InputError,
)
from qualitycheck.core._errors import (
    Problem as Problem,
)
from qualitycheck.core._errors import (
    QualitycheckError as QualitycheckError,
)
from qualitycheck.core._errors import (
    RunIncompleteError as RunIncompleteError,
)
from qualitycheck.core._errors import (
    RunMismatchError as RunMismatchError,
)
from qualitycheck.core._errors import (
    StoreError as StoreError,
)
from qualitycheck.core._errors import (
    SuiteError as SuiteError,
)
from qualitycheck.core._lazy import lazy_exports
from qualitycheck.core._records import (
    FORMAT_VERSION as FORMAT_VERSION,
)
from qualitycheck.core._records import (
    ErrorInfo as ErrorInfo,
)
from qualitycheck.core._records import (
    Response as Response,
)
from qualitycheck.core._records import (
    Score as Score,
)
from qualitycheck.core._records import (
    ScoreStatus as ScoreStatus,
)
from qualitycheck.core._records import (
    Usage as Usage,
)
from qualitycheck.core._store import (
    STORE_NAME as STORE_NAME,
)
from qualitycheck.core._store import (
    CaseRecords as CaseRecords,
)
from qualitycheck.core._store import (
    GroupsById as GroupsById,
)
from qualitycheck.core._store import (
    RunStore as RunStore,
)
from qualitycheck.core._store import (
    StoredCases as StoredCases,
)
from qualitycheck.core._store import (
    StoredOutcomes as StoredOutcomes,
)
from qualitycheck.core._store import (
    load_run as load_run,
)

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "ENTRY_POINT_GROUP",
    "FORMAT_VERSION",
    "STORE_NAME",
    "Case",
    "CaseRecords",
    "CheckFamily",
    "CheckFamilyError",
    "CheckRegistry",
    "CheckSpec",
    "Checks",
    "Config",
    "ConfigError",
    "ErrorInfo",
    "GroupsById",
    "HttpClient",
    "HttpError",
    "InputError",
    "JudgeTarget",
    "LoadContext",
    "Outcome",
    "Problem",
    "QualitycheckError",
    "Response",
    "RunIncompleteError",
    "RunMismatchError",
    "RunOptions",
    "RunStore",
    "Score",
    "ScoreStatus",
    "StoreError",
    "StoredCases",
    "StoredOutcomes",
    "SuiteCases",
    "SuiteError",
    "SuiteScan",
    "Target",
    "Usage",
    "check_registry",
    "iter_suite",
    "load_config",
    "load_run",
    "load_suite",
    "scan_suite",
    "suite_files",
    "suite_fingerprint",
]

if TYPE_CHECKING:
    from qualitycheck.core._http import (
        HttpClient as HttpClient,
    )
    from qualitycheck.core._http import (
        HttpError as HttpError,
    )
    from qualitycheck.core._http import (
        Outcome as Outcome,
    )

# the HTTP layer pulls in aiohttp: imported on first use, so reading a suite never pays for it
__getattr__ = lazy_exports(__name__, {"HttpClient": "_http", "HttpError": "_http", "Outcome": "_http"})
