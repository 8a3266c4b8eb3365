"""The demo model cache: reused only when it matches its manifest; bad inputs are named."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from qualitycheck.engines import _model as m


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QC_HOME", str(tmp_path))
    return tmp_path


def _fake_conversion(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (folder / "model.safetensors").write_bytes(b"\0" * 100)
    files = m._files_digest(folder)
    manifest = {"version": m.MANIFEST_VERSION, "gguf_sha256": m.GGUF_SHA256, "files": files, "files_sha256": m._manifest_hash(files)}
    (folder / m.MANIFEST_NAME).write_text(json.dumps(manifest))


def test_verified_folder_is_reused_without_converting(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_conversion(m.demo_model_dir())
    monkeypatch.setattr(m, "_convert", lambda *a: pytest.fail("converted again"))
    assert m.prepare() == home / "models" / m.DEMO_MODEL_NAME
    assert m.verify(m.demo_model_dir()) is None


def test_changed_or_missing_files_are_detected(home: Path) -> None:
    d = m.demo_model_dir()
    _fake_conversion(d)
    (d / "model.safetensors").write_bytes(b"\1" * 100)
    assert "model.safetensors" in (m.verify(d) or "")
    (d / "model.safetensors").unlink()
    assert "model.safetensors" in (m.verify(d) or "")
    (d / m.MANIFEST_NAME).unlink()
    assert "interrupted" in (m.verify(d) or "")


def test_manifest_from_another_source_is_refused(home: Path) -> None:
    d = m.demo_model_dir()
    _fake_conversion(d)
    data = json.loads((d / m.MANIFEST_NAME).read_text())
    data["gguf_sha256"] = "0" * 64
    (d / m.MANIFEST_NAME).write_text(json.dumps(data))
    assert "another source" in (m.verify(d) or "")


def test_wrong_wheel_is_named_and_leaves_no_half_folder(home: Path) -> None:
    wheels = home / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / m.WHEEL_FILE, "w") as zf:
        zf.writestr(m.GGUF_MEMBER, b"not the model")
    with pytest.raises(m.ModelPrepareError, match="expected b179c952"):
        m.prepare()
    assert not m.demo_model_dir().exists()
    assert list((home / "models").iterdir()) == []
