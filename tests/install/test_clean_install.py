"""A user's install, as the README's quick start does it: a fresh virtualenv without vLLM.

The engine venv that `scripts/dev.sh` builds gets many packages through vLLM,
so an import that pyproject.toml forgets to declare passes every other test
and breaks `qualitycheck --help` for a user who installs with plain pip.
These tests install the checkout into an empty venv (from pip's cache and the
machine's wheels, so it stays cheap) and run the commands a new user runs.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from qualitycheck.testserver import TestServer
from tests.helpers import qa_cases, run_argv, write_suite

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "qualitycheck"

pytestmark = pytest.mark.install


def _requirement_name(req: str) -> str:
    name = req.split(";")[0]
    for sep in "[<>=!~ ":
        name = name.split(sep)[0]
    return name.strip().lower().replace("_", "-")


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_requirement_name(r) for r in project["dependencies"]}


def _imported_top_level() -> set[str]:
    """Top-level modules the package imports (at any depth in a module: lazy imports count too)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


# Imported only by the engine tooling (`scripts/dev.sh` installs them with vLLM or the `model` extra),
# never by a command a user of their own servers runs.
ENGINE_ONLY = {"torch", "transformers", "gguf", "accelerate"}
# Imported only where an optional extra is needed (a clear exit-2 message names the extra without it):
# module → (extra, the distribution that provides it).
OPTIONAL = {
    "pyarrow": ("parquet", "pyarrow"),
    "uvloop": ("shadow", "uvloop"),
    "datasets": ("datasets", "datasets"),
    "huggingface_hub": ("datasets", "huggingface-hub"),
    "inspect_ai": ("inspect", "inspect-ai"),
    "mlflow": ("mlflow", "mlflow-skinny"),
}


def _extra(name: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_requirement_name(r) for r in project["optional-dependencies"].get(name, [])}


def test_pyproject_declares_every_import_and_nothing_else() -> None:
    stdlib = set(sys.stdlib_module_names)
    third_party = {m for m in _imported_top_level() if m not in stdlib and m != "qualitycheck"} - ENGINE_ONLY - set(OPTIONAL)
    dists = metadata.packages_distributions()
    needed: dict[str, str] = {}
    for module in sorted(third_party):
        owners = dists.get(module)
        assert owners, f"qualitycheck imports {module!r}, which no installed distribution provides"
        needed[_requirement_name(owners[0])] = module
    declared = _declared()
    missing = {d: m for d, m in needed.items() if d not in declared}
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    unused = declared - set(needed)
    assert not unused, f"declared in pyproject.toml but never imported: {sorted(unused)}"


def test_optional_imports_are_declared_in_their_extra() -> None:
    imported = _imported_top_level()
    for module, (extra, dist) in OPTIONAL.items():
        assert module in imported, f"{module} is listed as optional but never imported"
        assert dist in _extra(extra), f"{module} is imported behind the {extra!r} extra, which does not declare {dist}"
        assert dist not in _declared(), f"{module} is optional, yet a dependency of every install"


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv made from the base interpreter, with only `pip install .` in it."""
    work = tmp_path_factory.mktemp("clean")
    venv = work / "venv"
    # pip builds a plain `pip install .` in the source folder (build/, *.egg-info): build a copy instead
    source = work / "src"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", "build", "reports", "tests", "*.egg-info", "__pycache__", ".venv"),
    )
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(source)], check=True, timeout=900, env=env
    )
    return venv


def _run(venv: Path, *args: str, cwd: Path, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    proc = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode in ok, f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_clean_venv_has_no_vllm(clean_venv: Path, tmp_path: Path) -> None:
    proc = _run(
        clean_venv,
        str(clean_venv / "bin" / "python"),
        "-c",
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is not None)",
        cwd=tmp_path,
    )
    assert proc.returncode == 0


def test_quick_start_in_a_clean_venv(clean_venv: Path, tmp_path: Path) -> None:
    """--help, validate suites/, a short run against the test server, then the pytest gate on that run."""
    bin_ = clean_venv / "bin"
    assert "usage: qualitycheck" in _run(clean_venv, str(bin_ / "qualitycheck"), "--help", cwd=tmp_path).stdout
    assert "cases OK" in _run(clean_venv, str(bin_ / "qualitycheck"), "validate", str(ROOT / "suites"), cwd=tmp_path).stdout

    suite = write_suite(tmp_path / "suite.jsonl", qa_cases(6, checks={"contains": "42"}))
    out = tmp_path / "run"
    with TestServer(default="The answer is 42.") as b, TestServer(default="The answer is 42.") as c:
        run = _run(
            clean_venv,
            str(bin_ / "qualitycheck"),
            *run_argv(b.url, c.url, suite, out, model="m"),
            cwd=tmp_path,
            ok=(0, 1),
        )
    assert (out / "summary.json").is_file(), run.stderr
    assert (out / "report.html").is_file()

    gate = _run(clean_venv, str(bin_ / "python"), "-m", "pytest", "--qc-run", str(out), "-p", "no:cacheprovider", cwd=tmp_path, ok=(0, 1))
    assert "qualitycheck verdict" in gate.stdout, gate.stdout
    assert "INTERNALERROR" not in gate.stdout + gate.stderr


def test_editable_install_from_the_readme(clean_venv: Path, tmp_path: Path) -> None:
    """The README's `pip install -e .` (into the same venv: its dependencies are already there).

    The venv held the built package, which the test above ran under pytest:
    pytest rewrites the asserts of a plugin's whole distribution and, where
    bytecode may be written, leaves `*-pytest-*.pyc` files in
    site-packages/qualitycheck that pip's uninstall does not know of. The
    folder they keep would be imported as an empty namespace package ahead
    of the editable install, so it goes as docs/ENGINE.md tells a user who
    switches installs to do.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(clean_venv / "bin" / "pip"), "uninstall", "-q", "-y", "qualitycheck"], check=True, timeout=300, env=env)
    for stray in clean_venv.glob("lib/python*/site-packages/qualitycheck"):
        assert not list(stray.rglob("*.py")), f"pip's uninstall left modules in {stray}"
        shutil.rmtree(stray)
    subprocess.run(
        [str(clean_venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "-e", str(ROOT)], check=True, timeout=600, env=env
    )
    proc = _run(
        clean_venv, str(clean_venv / "bin" / "python"), "-c", "import qualitycheck, sys; print(qualitycheck.__file__)", cwd=tmp_path
    )
    assert proc.stdout.strip().startswith(str(PACKAGE)), proc.stdout
    assert "usage: qualitycheck" in _run(clean_venv, str(clean_venv / "bin" / "qualitycheck"), "--help", cwd=tmp_path).stdout
