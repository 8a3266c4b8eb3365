"""The records every stage shares: errors, cases and suites, config, responses and scores, the run store,
and the one HTTP layer. The lowest layer: it imports no other qualitycheck package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qualitycheck.core._cases import (
    Case as Case,
    SuiteCases as SuiteCases,
    SuiteScan as SuiteScan,
    iter_suite as iter_suite,
    load_suite as load_suite,
    scan_suite as scan_suite,
    suite_files as suite_files,
    suite_fingerprint as suite_fingerprint,
)
from qualitycheck.core._checks import (
    ENTRY_POINT_GROUP as ENTRY_POINT_GROUP,
    CheckFamily as CheckFamily,
    CheckFamilyError as CheckFamilyError,
    CheckRegistry as CheckRegistry,
    CheckSpec as CheckSpec,
    Checks as Checks,
    LoadContext as LoadContext,
    check_registry as check_registry,
)
from qualitycheck.core._config import (
    Config as Config,
    DEFAULT_CONFIG_NAME as DEFAULT_CONFIG_NAME,
    JudgeTarget as JudgeTarget,
    RunOptions as RunOptions,
    Target as Target,
    load_config as load_config,
)
from qualitycheck.core._errors import (
    ConfigError as ConfigError,
    InputError as InputError,
    Problem as Problem,
    QualitycheckError as QualitycheckError,
    RunIncompleteError as RunIncompleteError,
    RunMismatchError as RunMismatchError,
    StoreError as StoreError,
    SuiteError as SuiteError,
)
from qualitycheck.core._lazy import lazy_exports
from qualitycheck.core._records import (
    ErrorInfo as ErrorInfo,
    FORMAT_VERSION as FORMAT_VERSION,
    Response as Response,
    Score as Score,
    ScoreStatus as ScoreStatus,
    Usage as Usage,
)
from qualitycheck.core._store import (
    CaseRecords as CaseRecords,
    GroupsById as GroupsById,
    RunStore as RunStore,
    STORE_NAME as STORE_NAME,
    StoredCases as StoredCases,
    StoredOutcomes as StoredOutcomes,
    load_run as load_run,
)

__all__ = [
    "Case",
    "CaseRecords",
    "CheckFamily",
    "CheckFamilyError",
    "CheckRegistry",
    "CheckSpec",
    "Checks",
    "Config",
    "ConfigError",
    "DEFAULT_CONFIG_NAME",
    "ENTRY_POINT_GROUP",
    "ErrorInfo",
    "FORMAT_VERSION",
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
    "STORE_NAME",
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
        HttpError as HttpError,
        Outcome as Outcome,
    )

# the HTTP layer pulls in aiohttp: imported on first use, so reading a suite never pays for it
__getattr__ = lazy_exports(__name__, {"HttpClient": "_http", "HttpError": "_http", "Outcome": "_http"})
