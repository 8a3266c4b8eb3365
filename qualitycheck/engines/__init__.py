"""Local engines (vLLM, llama.cpp's llama-server): the demo model and server launching.

Used by `qualitycheck demo`, the end-to-end tests and `sweep` launch
templates. Importing this package imports neither vLLM nor torch (those are
needed only inside the servers and for model conversion), and names are
resolved lazily so `python -m qualitycheck.engines prepare` runs cleanly.
"""

from __future__ import annotations

from qualitycheck.core._lazy import lazy_exports

__all__ = [
    "DEMO_MODEL_NAME",
    "EngineServer",
    "LaunchError",
    "LlamaServer",
    "ModelPrepareError",
    "VllmServer",
    "demo_gguf",
    "demo_model_dir",
    "draft_model_config",
    "free_port",
    "launch",
    "launch_llama",
    "launch_template",
    "llama_server_binary",
    "ngram_config",
    "prepare",
    "qc_home",
    "start_together",
    "stop_all",
    "suffix_config",
]

_HOME = {name: "_launcher" for name in __all__} | {
    "DEMO_MODEL_NAME": "_model",
    "ModelPrepareError": "_model",
    "demo_model_dir": "_model",
    "demo_gguf": "_model",
    "prepare": "_model",
    "qc_home": "_model",
}

__getattr__ = lazy_exports(__name__, _HOME)
