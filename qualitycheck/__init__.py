"""qualitycheck: evidence before switching on speculative decoding.

The public API is small on purpose; everything else is reached through the
CLI or the pytest plugin. `__all__` is guarded by a test.
"""

from qualitycheck.core._cases import Case, load_suite
from qualitycheck.core._config import Target
from qualitycheck.core._config_file import Config, load_config
from qualitycheck.core._errors import QualitycheckError
from qualitycheck.core._records import Response, Score
from qualitycheck.core._store import RunStore, load_run

# Declares the built-in check families in `core`'s registry. Python runs this
# front before any submodule, so no case is validated before they exist.
import qualitycheck.scoring  # noqa: F401  # isort: skip

__version__ = "0.1.0"

__all__ = [
    "Case",
    "Config",
    "QualitycheckError",
    "Response",
    "RunStore",
    "Score",
    "Target",
    "load_config",
    "load_run",
    "load_suite",
]
