"""What preflight compares of two llama-servers' /props: the model file by name, wherever each host mounts it."""

from __future__ import annotations

from typing import Any

from qualitycheck.generation._preflight import _llama_props


def _props(path: str, **over: Any) -> dict[str, Any]:
    return {
        "chat_template": "{{ messages }}",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_path": path,
        "model_ftype": "Q8_0",
        "default_generation_settings": {"n_ctx": 1024, "params": {"temperature": 0.8, "speculative.n_max": 8}},
        **over,
    }


def test_the_same_file_mounted_at_two_paths_matches():
    a = _llama_props(_props("/models/a/smollm2-135m-instruct-q8_0.gguf"))
    b = _llama_props(_props("/mnt/cache/smollm2-135m-instruct-q8_0.gguf"))
    assert a == b and a["model_file"] == "smollm2-135m-instruct-q8_0.gguf"


def test_another_file_a_template_or_a_sampling_default_differs_but_not_the_draft_settings():
    base = _llama_props(_props("/m/x.gguf"))
    assert _llama_props(_props("/m/y.gguf")) != base
    assert _llama_props(_props("/m/x.gguf", chat_template="other")) != base
    drafted = _props("/m/x.gguf")
    drafted["default_generation_settings"]["params"]["speculative.n_max"] = 16
    assert _llama_props(drafted) == base
