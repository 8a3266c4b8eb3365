"""Local vLLM engines: the demo model, server launching, the demo run.

Used by `qualitycheck demo`, the end-to-end tests and `sweep` launch
templates. Importing this package imports neither vLLM nor torch (those are
needed only inside the servers and for model conversion), and names are
resolved lazily so `python -m qualitycheck.engines.model` runs cleanly.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DEMO_MODEL_NAME",
    "LaunchError",
    "ModelPrepareError",
    "VllmServer",
    "demo_model_dir",
    "draft_model_config",
    "free_port",
    "launch",
    "launch_template",
    "ngram_config",
    "prepare",
    "qc_home",
    "run_demo",
    "start_together",
    "stop_all",
]

_HOME = {
    "DEMO_MODEL_NAME": "model", "ModelPrepareError": "model", "demo_model_dir": "model", "prepare": "model",
    "qc_home": "model", "run_demo": "demo",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_HOME.get(name, 'launcher')}", __name__)
    return getattr(module, name)
