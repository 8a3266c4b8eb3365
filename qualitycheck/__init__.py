"""qualitycheck: evidence before switching on speculative decoding.

The public API is small on purpose; everything else is reached through the
CLI or the pytest plugin. `__all__` is guarded by a test.
"""

from .cases import Case, load_suite
from .config import Config, Target, load_config
from .errors import QualitycheckError
from .records import Response, Score
from .store import RunStore, load_run

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
