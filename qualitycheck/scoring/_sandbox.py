"""Running model-written Python where it cannot reach the network, the host or its secrets.

Layers, strongest available first (probed once per process, see `isolation()`):

``namespaces`` (we are root, `unshare` works)
    new network namespace (no interfaces but a downed loopback: no network,
    not even the host's localhost), new PID namespace whose init is the
    program (when it ends, or is killed, the kernel kills everything it
    started), new mount namespace with size-capped private tmpfs over
    /tmp, /var/tmp, /dev/shm and /run/lock (the program's working dir, HOME
    and TMPDIR are /tmp/sandbox, the only place below /tmp it may write;
    nothing reaches the host disk), privileges dropped to
    `nobody` (nothing outside world-writable paths can be written, root's
    files cannot be read), plus a cgroup with `pids.max` (and
    `memory.limit_in_bytes` on cgroup v1) because root ignores RLIMIT_NPROC.
``user-namespaces`` (not root, unprivileged user namespaces allowed)
    the same namespaces via `unshare --map-root-user`, without the uid drop
    or cgroups (RLIMIT_NPROC then does apply, to our own uid).
``none``
    only a new session, a fresh temp dir, a scrubbed environment, rlimits and
    (when root) the cgroups.
    Network and the host filesystem are reachable: every score records
    `isolation_weak: true` and scoring prints a warning.

Always: scrubbed environment (PATH, LANG, HOME, TMPDIR only: no API keys),
stdin from /dev/null,
rlimits on CPU seconds, address space, file size, open files and processes,
a wall-clock timeout that kills the whole process group (and the PID
namespace and cgroup with it), and stdout/stderr capped.

This contains accidents and typical hostile snippets (fork bombs, memory
bombs, disk fills, network calls, reading env secrets). It is not built to
withstand code written specifically to attack qualitycheck.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Limits", "SandboxResult", "isolation", "run_python"]

NOBODY = 65534
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_TMPFS_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_CGROUP_ROOTS = {"pids": "/sys/fs/cgroup/pids", "memory": "/sys/fs/cgroup/memory"}


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run (per process where rlimits apply)."""

    wall_s: float = 10.0
    memory_bytes: int = 512 << 20
    """RLIMIT_AS per process, and the memory cgroup of the whole run when available."""
    file_bytes: int = 16 << 20
    """RLIMIT_FSIZE: the largest file the program may write (stdout/stderr included)."""
    disk_bytes: int = 32 << 20
    """Size of each private tmpfs (working dir, /tmp ...) in namespace mode."""
    processes: int = 64
    open_files: int = 64
    output_bytes: int = 32 << 10
    """How much of stdout and stderr (each) is kept for the report."""

    @property
    def cpu_s(self) -> int:
        return int(self.wall_s) + 2


@dataclass(frozen=True)
class SandboxResult:
    exit_code: int | None
    timed_out: bool
    report: dict[str, Any] | None
    """What the program wrote to its report fd before exiting; None if it never did."""
    stdout: str
    stderr: str
    isolation: str
    isolation_detail: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0


# ------------------------------------------------------------ probing


_probe_lock = threading.Lock()
_probed: dict[str, Any] | None = None

_UNSHARE_NS = ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10, env={"PATH": _SAFE_PATH}).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _world_runnable(path: str) -> bool:
    """Can `nobody` execute this interpreter (every parent dir searchable)?"""
    p = Path(os.path.realpath(path))
    try:
        if not p.stat().st_mode & 0o001:
            return False
        return all(d.stat().st_mode & 0o001 for d in p.parents)
    except OSError:
        return False


def _cgroups_usable() -> list[str]:
    ok = []
    for ctl, root in _CGROUP_ROOTS.items():
        probe = Path(root) / "qualitycheck" / f"probe-{os.getpid()}"
        try:
            probe.mkdir(parents=True, exist_ok=True)
            probe.rmdir()
            ok.append(ctl)
        except OSError:
            continue
    return ok


def _masked(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in _TMPFS_DIRS)


def _unmasked_python(exe: str) -> str:
    """An interpreter path that still exists once private tmpfs cover /tmp and friends.

    A virtualenv under /tmp (e.g. QC_HOME=/tmp/...) links to its base
    interpreter; inside the sandbox only the stdlib is needed, so the base
    interpreter (or the system python3) serves.
    """
    if not _masked(exe):
        return exe
    real = os.path.realpath(exe)
    if not _masked(real):
        return real
    return shutil.which("python3", path=_SAFE_PATH) or exe


def isolation() -> dict[str, Any]:
    """The strongest isolation that works on this machine, probed once per process."""
    global _probed
    with _probe_lock:
        if _probed is not None:
            return _probed
        unshare = shutil.which("unshare", path=_SAFE_PATH)
        root = os.geteuid() == 0
        info: dict[str, Any]
        if unshare and root and _works([unshare, *_UNSHARE_NS, "--", "true"]):
            user_python = sys.executable if _world_runnable(sys.executable) else shutil.which("python3", path=_SAFE_PATH)
            user_python = _unmasked_python(user_python) if user_python else None
            info = {"level": "namespaces", "unshare": [unshare, *_UNSHARE_NS], "drop_to_nobody": bool(user_python),
                    "program_python": user_python or sys.executable, "cgroups": _cgroups_usable()}
        elif unshare and _works([unshare, "--user", "--map-root-user", *_UNSHARE_NS, "--", "true"]):
            info = {"level": "user-namespaces", "unshare": [unshare, "--user", "--map-root-user", *_UNSHARE_NS],
                    "drop_to_nobody": False, "program_python": _unmasked_python(sys.executable), "cgroups": []}
        else:
            # Without namespaces a root process can still bound processes and memory with cgroups.
            info = {"level": "none", "unshare": None, "drop_to_nobody": False, "program_python": sys.executable,
                    "cgroups": _cgroups_usable() if root else []}
        info["weak"] = info["level"] == "none"
        if info["weak"]:
            print("qualitycheck: WARNING: cannot create namespaces (unshare failed): unit tests run WITHOUT network "
                  "or filesystem isolation, only with rlimits and a scrubbed environment", file=sys.stderr)
        _probed = info
        return info


# ------------------------------------------------------------ the first process inside

# Runs as the sandbox's first process (PID 1 of its namespace in namespace
# mode): joins the cgroups, sets rlimits, mounts the private tmpfs, writes
# the program's files, drops to nobody and execs the program. Reads its
# configuration from stdin so no size limit on argv applies.
_STAGE2 = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.stdin.buffer.read())
try:
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    for path in cfg["cgroups"]:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write("0")
    if cfg["mounts"]:
        libc = ctypes.CDLL(None, use_errno=True)
        for d in cfg["mounts"]:
            if os.path.isdir(d):
                # /tmp and /var/tmp are root's: the program writes only in its own dir below /tmp
                mode = "1777" if d == "/dev/shm" else "0755"
                opts = ("size=%d,mode=%s" % (cfg["disk_bytes"], mode)).encode()
                if libc.mount(b"tmpfs", d.encode(), b"tmpfs", 2 | 4, opts) != 0:  # MS_NOSUID | MS_NODEV
                    raise OSError(ctypes.get_errno(), "mount tmpfs on " + d)
    work = cfg["work"]
    os.makedirs(work, exist_ok=True)
    for name, text in cfg["files"].items():
        with open(os.path.join(work, name), "w", encoding="utf-8") as f:
            f.write(text)
    if cfg["uid"] is not None:
        os.chown(work, cfg["uid"], cfg["uid"])
    os.chmod(work, 0o700)
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    os.chdir(work)
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    env = {"PATH": cfg["path"], "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work}
    os.execve(cfg["python"], [cfg["python"], "-I", "-B", *cfg["argv"]], env)
except BaseException as exc:
    os.write(int(cfg["argv"][-1]), json.dumps({"status": "sandbox_error", "reason": "%s: %s" % (type(exc).__name__, exc)}).encode())
    os._exit(125)
"""


class _Cgroup:
    """A throwaway cgroup per run; everything left in it is killed at the end."""

    def __init__(self, controllers: list[str], limits: Limits):
        self.paths: list[Path] = []
        name = f"run-{uuid.uuid4().hex[:12]}"
        settings = {"pids": {"pids.max": str(limits.processes)},
                    "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)}}
        for ctl in controllers:
            p = Path(_CGROUP_ROOTS[ctl]) / "qualitycheck" / name
            try:
                p.mkdir(parents=True)
                for k, v in settings[ctl].items():
                    (p / k).write_text(v)
                self.paths.append(p)
            except OSError:
                self._remove(p)

    def kill_all(self) -> None:
        for p in self.paths:
            for _ in range(200):
                try:
                    pids = [int(x) for x in (p / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.01)

    @staticmethod
    def _remove(p: Path) -> None:
        for _ in range(100):
            try:
                p.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)

    def close(self) -> None:
        self.kill_all()
        for p in self.paths:
            self._remove(p)


def _read_capped(path: Path, cap: int) -> str:
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    return text + "\n[... output cut]" if len(data) > cap else text


def run_python(files: dict[str, str], argv: list[str], limits: Limits = Limits()) -> SandboxResult:
    """Run `python -I -B *argv` in a fresh dir holding `files`, isolated as well as this host allows.

    The program gets a report file descriptor, whose number is appended to
    `argv`; whatever JSON it writes there is returned as `report`. A program
    that exits (or is killed) before writing it has `report=None`.
    """
    info = isolation()
    host_dir = Path(tempfile.mkdtemp(prefix="qc-sandbox-"))
    cg = _Cgroup(info["cgroups"], limits) if info["cgroups"] else None
    namespaced = info["level"] != "none"
    try:
        report_path, out_path, err_path = host_dir / "report", host_dir / "stdout", host_dir / "stderr"
        report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT, 0o600)
        # RLIMIT_NPROC counts every process of the uid, so runs in parallel as nobody would share
        # it: with a per-run pids cgroup it is only a backstop, else it is the limit.
        per_run_pids = bool(cg and any(p.parent.parent.name == "pids" for p in cg.paths))
        nproc = limits.processes * 64 if per_run_pids else limits.processes
        rlimits = {"RLIMIT_CPU": limits.cpu_s, "RLIMIT_AS": limits.memory_bytes, "RLIMIT_FSIZE": limits.file_bytes,
                   "RLIMIT_NOFILE": limits.open_files, "RLIMIT_NPROC": nproc, "RLIMIT_CORE": 0}
        uid = NOBODY if info["drop_to_nobody"] else None
        cfg = {
            "cgroups": [str(p) for p in cg.paths] if cg else [],
            "mounts": list(_TMPFS_DIRS) if namespaced else [],
            "disk_bytes": limits.disk_bytes,
            "work": "/tmp/sandbox" if namespaced else str(host_dir / "work"),
            "files": files,
            "uid": uid,
            "rlimits": rlimits,
            "path": _SAFE_PATH,
            "python": info["program_python"],
            "argv": [*argv, str(report_fd)],
        }
        cmd = [*(info["unshare"] or []), *(["--"] if info["unshare"] else []), sys.executable, "-I", "-S", "-c", _STAGE2]
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err, pass_fds=(report_fd,),
                                    env={"PATH": _SAFE_PATH, "LANG": "C.UTF-8"}, cwd=host_dir, start_new_session=True)
        os.close(report_fd)
        timed_out = False
        try:
            proc.communicate(json.dumps(cfg).encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the group, and the namespace with its init
            except ProcessLookupError:
                pass
            proc.wait()
            if cg:
                cg.kill_all()
        wall = time.monotonic() - start
        raw = report_path.read_bytes()
        try:
            report = json.loads(raw) if raw else None
        except ValueError:
            report = {"status": "error", "reason": "unreadable report", "raw": raw[:200].decode("utf-8", "replace")}
        return SandboxResult(
            exit_code=None if timed_out else proc.returncode,
            timed_out=timed_out,
            report=report,
            stdout=_read_capped(out_path, limits.output_bytes),
            stderr=_read_capped(err_path, limits.output_bytes),
            isolation=info["level"],
            isolation_detail={"network": namespaced, "pid_namespace": namespaced, "private_tmp": namespaced,
                              "uid": "nobody" if uid is not None else ("mapped-root" if namespaced else "self"),
                              "cgroups": [p.parent.parent.name for p in cg.paths] if cg else []},
            wall_s=round(wall, 3),
        )
    finally:
        if cg:
            cg.close()
        shutil.rmtree(host_dir, ignore_errors=True)
