"""Running model-written Python where it cannot reach the network, the host or its secrets.

Layers, strongest available first (probed once per process, see `isolation()`):

``namespaces`` (we are root, `unshare` works)
    new network namespace (no interfaces but a downed loopback: no network,
    not even the host's localhost), a new IPC namespace, new PID namespace whose init is the
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

How a run starts. Starting `unshare` and an interpreter per run costs far
more than most unit tests take, so with namespaces each process keeps a
*fork server* (`_ForkServer`): one "zygote" interpreter, started once inside
its own network, PID and mount namespaces with a scrubbed environment, with
the harness's modules imported and the harness itself compiled. It never
runs model code and never reads a run's files (they reach only the run,
through a memfd). It keeps *spares* ready: forks that are PID 1 of a new PID
namespace and have already unshared a new mount, network and IPC namespace,
mounted the private tmpfs and /proc, and joined a cgroup slot. A run goes to
a spare, which writes the run's cgroup limits and files, sets the rlimits,
drops to `nobody` and runs the program in place of an exec. So every run is
a fresh fork of the clean zygote, never a reused interpreter: nothing one
run does (files, modules, environment) is seen by another. The zygote kills
a run's PID 1 at its wall limit (the kernel then kills its whole namespace),
and answers once that PID 1 is reaped. A zygote that dies is replaced and its
runs in flight are run again. It dies with the scoring process: atexit ends
it, and if we die without atexit its end of the socket sees EOF and it
cleans up and exits. It stays root inside its namespaces because every run
needs mounts, cgroups and the uid drop; each run drops privileges before its
program starts, where the per-run path drops them. Its forks share its hash
seed (fresh interpreters each draw one); `random` reseeds in every fork.
Only the ``namespaces`` level uses it (under ``user-namespaces`` runs would
share the zygote's user namespace, and what is kept per user namespace, such
as keyrings; there each run still gets its own). Without namespaces
(``none``), with user namespaces, or where no zygote can start, each run
starts its own `unshare` and interpreter (`_run_fresh`).

This contains accidents and typical hostile snippets (fork bombs, memory
bombs, disk fills, network calls, reading env secrets). It is not built to
withstand code written specifically to attack qualitycheck.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import os
import select
import shutil
import signal
import socket
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
            info = {
                "level": "namespaces",
                "unshare": [unshare, *_UNSHARE_NS],
                "drop_to_nobody": bool(user_python),
                "program_python": user_python or sys.executable,
                "cgroups": _cgroups_usable(),
            }
        elif unshare and _works([unshare, "--user", "--map-root-user", *_UNSHARE_NS, "--", "true"]):
            info = {
                "level": "user-namespaces",
                "unshare": [unshare, "--user", "--map-root-user", *_UNSHARE_NS],
                "drop_to_nobody": False,
                "program_python": _unmasked_python(sys.executable),
                "cgroups": [],
            }
        else:
            # Without namespaces a root process can still bound processes and memory with cgroups.
            info = {
                "level": "none",
                "unshare": None,
                "drop_to_nobody": False,
                "program_python": sys.executable,
                "cgroups": _cgroups_usable() if root else [],
            }
        info["weak"] = info["level"] == "none"
        if info["weak"]:
            print(
                "qualitycheck: WARNING: cannot create namespaces (unshare failed): unit tests run WITHOUT network "
                "or filesystem isolation, only with rlimits and a scrubbed environment",
                file=sys.stderr,
            )
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


def _cgroup_limits(limits: Limits) -> dict[str, dict[str, str]]:
    return {"pids": {"pids.max": str(limits.processes)}, "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)}}


class _Cgroup:
    """A throwaway cgroup per run; everything left in it is killed at the end."""

    def __init__(self, controllers: list[str], limits: Limits):
        self.paths: list[Path] = []
        name = f"run-{uuid.uuid4().hex[:12]}"
        settings = _cgroup_limits(limits)
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
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
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

    @classmethod
    def existing(cls, paths: list[Path]) -> _Cgroup:
        cg = cls.__new__(cls)
        cg.paths = paths
        return cg


def _read_capped(path: Path, cap: int) -> str:
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    return text + "\n[... output cut]" if len(data) > cap else text


def _rlimits(limits: Limits, per_run_pids: bool) -> dict[str, int]:
    # RLIMIT_NPROC counts every process of the uid, so runs in parallel as nobody would share
    # it: with a per-run pids cgroup it is only a backstop, else it is the limit.
    nproc = limits.processes * 64 if per_run_pids else limits.processes
    return {
        "RLIMIT_CPU": limits.cpu_s,
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_NPROC": nproc,
        "RLIMIT_CORE": 0,
    }


def _detail(info: dict[str, Any], cgroups: list[str]) -> dict[str, Any]:
    namespaced = info["level"] != "none"
    return {
        "network": namespaced,
        "pid_namespace": namespaced,
        "private_tmp": namespaced,
        "uid": "nobody" if info["drop_to_nobody"] else ("mapped-root" if namespaced else "self"),
        "cgroups": cgroups,
    }


def _parse_report(raw: bytes) -> dict[str, Any] | None:
    try:
        report = json.loads(raw) if raw else None
    except ValueError:
        return {"status": "error", "reason": "unreadable report", "raw": raw[:200].decode("utf-8", "replace")}
    return report if report is None or isinstance(report, dict) else {"status": "error", "reason": "report is not an object"}


def _run_fresh(files: dict[str, str], argv: list[str], limits: Limits, info: dict[str, Any]) -> SandboxResult:
    """One run in its own `unshare` + interpreter: the path without namespaces, and the fallback."""
    host_dir = Path(tempfile.mkdtemp(prefix="qc-sandbox-"))
    cg = _Cgroup(info["cgroups"], limits) if info["cgroups"] else None
    namespaced = info["level"] != "none"
    try:
        report_path, out_path, err_path = host_dir / "report", host_dir / "stdout", host_dir / "stderr"
        report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT, 0o600)
        cgroups = [p.parent.parent.name for p in cg.paths] if cg else []
        rlimits = _rlimits(limits, "pids" in cgroups)
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
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                pass_fds=(report_fd,),
                env={"PATH": _SAFE_PATH, "LANG": "C.UTF-8"},
                cwd=host_dir,
                start_new_session=True,
            )
        os.close(report_fd)
        timed_out = False
        try:
            proc.communicate(json.dumps(cfg).encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the group, and the namespace with its init
            proc.wait()
            if cg:
                cg.kill_all()
        wall = time.monotonic() - start
        report = _parse_report(report_path.read_bytes())
        return SandboxResult(
            exit_code=None if timed_out else proc.returncode,
            timed_out=timed_out,
            report=report,
            stdout=_read_capped(out_path, limits.output_bytes),
            stderr=_read_capped(err_path, limits.output_bytes),
            isolation=info["level"],
            isolation_detail=_detail(info, cgroups),
            wall_s=round(wall, 3),
        )
    finally:
        if cg:
            cg.close()
        shutil.rmtree(host_dir, ignore_errors=True)


# ------------------------------------------------------------ the fork server

# The zygote: started once per server inside its own network, PID and mount
# namespaces (it is PID 1 there), with the scrubbed environment, by the
# program's interpreter; argv is the fd of its SOCK_SEQPACKET socket and a JSON
# configuration (cgroup roots and slot prefix, tmpfs mounts and default size,
# how many spares). It is single-threaded: one poll loop over its socket, its
# spares' sockets and a pidfd per spare and per run. It first sends
# {"ready": true} (or false and why, when this host cannot make a run's
# namespaces: the first spare is the probe); then it takes
#   {"op": "preload", "key": k, "name": n, "source": s}: compile a trusted main
#       script (the caller's harness, never model code) once, for every fork;
#   {"id": n, "wall_s": w, "main": k or null} with four fds: the run's
#       configuration (a memfd: the zygote never reads it, only the run's own
#       process does), its report, stdout and stderr.
# It answers each run with {"id": n, "status": exit code or -signal,
# "timed_out": bool, "cgroups": [controllers]} once the run's PID 1 is reaped
# (killed at `wall_s`). EOF on its socket (the scoring process is gone) ends
# every spare and run, removes the cgroup slots and ends the zygote.
_ZYGOTE = r"""
import array, collections, ctypes, itertools, json, os, resource, select, signal, socket, sys, time
import atexit, builtins, gc, traceback, types
# What the harness and typical tests import: loaded once here, shared copy-on-write by every fork.
import bisect, cmath, copy, functools, heapq, math, operator, random, re, string, typing

CTL = socket.socket(fileno=int(sys.argv[1]))
CONF = json.loads(sys.argv[2])
LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 2, 4, 8, 32
PR_SET_DUMPABLE = 4
REPORT = 3
OWN_PIDNS = os.open("/proc/self/ns/pid", os.O_RDONLY)
PROGRAMS = {}  # key of a trusted main script (see "preload") -> its code object, compiled once here
SPARE_SOCKS = []  # the zygote's end of each unassigned spare's socket: every fork closes them all


def check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def send(sock, msg):
    sock.send(json.dumps(msg).encode())


def why(exc):
    return "%s: %s" % (type(exc).__name__, exc)


def sandbox_error(fd, reason):
    os.write(fd, json.dumps({"status": "sandbox_error", "reason": reason}).encode())


def read_all(fd):
    chunks, pos = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, pos)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        pos += len(chunk)


def receive(sock):
    fds = array.array("i")
    msg, ancdata, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return msg, list(fds)


def write_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = text.encode()
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def tmpfs_options(d, disk_bytes):
    # /tmp and /var/tmp are root's: the program writes only in its own dir below /tmp
    return ("size=%d,mode=%s" % (disk_bytes, "1777" if d == "/dev/shm" else "0755")).encode()


def exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


# ---------------------------------------------------------------- one test's PID 1

def spare(sock, slot):
    # A test's PID 1 made before its test: namespaces, mounts and cgroups are set up here, off the
    # test's critical path. It holds nothing but its own socket; then it waits for its one test.
    cgroups = []
    try:
        CTL.close()
        for other in SPARE_SOCKS:
            other.close()
        keep = sock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        os.setsid()
        for ctl, root in CONF["cgroups"].items():
            path = "%s/%s-%d" % (root, CONF["prefix"], slot)
            try:
                os.makedirs(path, exist_ok=True)
            except OSError:
                continue  # as on the per-run path, a controller that cannot be had is left out
            write_file(path + "/cgroup.procs", "0")
            cgroups.append((ctl, path))
        check(LIBC.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
        for d in CONF["mounts"]:
            if os.path.isdir(d):
                check(LIBC.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                                 tmpfs_options(d, CONF["disk_bytes"])), "mount tmpfs on " + d)
        check(LIBC.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
    except BaseException as exc:
        try:
            sock.send(why(exc).encode() or b"?")
        finally:
            os._exit(125)
    sock.send(("ok " + ",".join(ctl for ctl, _ in cgroups)).encode())
    msg, fds = receive(sock)
    if not msg or len(fds) != 4:
        os._exit(0)
    sock.close()
    program(json.loads(msg), cgroups, fds)


def program(header, cgroups, fds):
    # The test itself: the rest of the setup as root, then the program as nobody, in place of
    # `python -I -B argv...`. Never returns.
    cfg_fd, report, out, err = fds
    try:
        cfg = json.loads(read_all(cfg_fd))
        for ctl, path in cgroups:
            for name, value in cfg["cgroup_limits"].get(ctl, {}).items():
                write_file(os.path.join(path, name), value)
        if cfg["disk_bytes"] != CONF["disk_bytes"]:
            for d in CONF["mounts"]:
                if os.path.isdir(d):
                    check(LIBC.mount(b"tmpfs", d.encode(), b"tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV,
                                     tmpfs_options(d, cfg["disk_bytes"])), "remount tmpfs on " + d)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(report, REPORT)
        report = REPORT
        os.closerange(REPORT + 1, os.sysconf("SC_OPEN_MAX"))
        work = cfg["work"]
        os.makedirs(work, exist_ok=True)
        for name, text in cfg["files"].items():
            write_file(os.path.join(work, name), text)
        if cfg["uid"] is not None:
            os.chown(work, cfg["uid"], cfg["uid"])
        os.chmod(work, 0o700)
        rlimits = cfg["rlimits"]
        if not any(ctl == "pids" for ctl, _ in cgroups):
            rlimits["RLIMIT_NPROC"] = cfg["nproc_without_pids_cgroup"]
        for name, value in rlimits.items():
            resource.setrlimit(getattr(resource, name), (value, value))
        os.chdir(work)
        if cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
            check(LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl")  # as after an exec: its own /proc files are its own
        os.environ.clear()
        os.environ.update({"PATH": cfg["path"], "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work})
        script = cfg["argv"][0]
        sys.argv = [*cfg["argv"], str(REPORT)]
        main = types.ModuleType("__main__")
        main.__file__ = script
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        code = PROGRAMS.get(header.get("main"))
        del cfg, rlimits
    except BaseException as exc:
        sandbox_error(report, why(exc))
        os._exit(125)
    status = 0
    try:
        if code is None:
            with open(script, "rb") as f:
                code = compile(f.read(), script, "exec")
        exec(code, main.__dict__)
    except SystemExit as exc:
        status = exit_code(exc)
    except BaseException:
        traceback.print_exc()
        status = 1
    # what the interpreter does on its way out: wait for threads, run atexit, flush
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
    except BaseException:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 120
    os._exit(status & 0xFF)


# ---------------------------------------------------------------- the zygote's loop
# Kept small: every page the zygote writes while forks share it is copied, so work that can be done
# in a spare (making its cgroups) is done there.
#
# Cgroups are slots, <prefix>-<slot>, each used by one test at a time and reused by a later spare:
# creating and removing a memory cgroup per test costs more than many tests. A slot is free again
# once its test's PID 1 is reaped, and then it is empty: every process in it was in that PID
# namespace, which the kernel empties before PID 1 can be reaped. Limits are written per test.

poller = select.poll()
spares = {}  # pidfd -> [pid, sock, slot, ready, controllers]: PID 1s waiting for a test
by_sock = {}  # fileno of a spare's socket -> its pidfd, until it says it is ready
ready = collections.deque()  # pidfds of spares ready for a test, oldest first
running = {}  # pidfd -> [id, pid, deadline, timed_out, slot, controllers]
queue = collections.deque()  # (request, fds) waiting for a spare
slots = itertools.count(1)
free_slots = []
failed = {"count": 0, "error": ""}


def new_spare():
    slot = free_slots.pop() if free_slots else next(slots)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    SPARE_SOCKS.append(ours)
    try:
        check(LIBC.setns(OWN_PIDNS, CLONE_NEWPID), "setns")  # undo the previous spare's unshare
        check(LIBC.unshare(CLONE_NEWPID), "unshare pid")  # the next child is PID 1 of a namespace of its own
        pid = os.fork()
    except OSError as exc:
        SPARE_SOCKS.remove(ours)
        ours.close()
        theirs.close()
        free_slots.append(slot)
        failed["count"] += 1
        failed["error"] = why(exc)
        return None
    if pid == 0:
        spare(theirs, slot)
    theirs.close()
    pidfd = os.pidfd_open(pid)
    spares[pidfd] = [pid, ours, slot, False, []]
    by_sock[ours.fileno()] = pidfd
    poller.register(pidfd, select.POLLIN)
    poller.register(ours, select.POLLIN)
    return pidfd


def spare_said(fd):
    pidfd = by_sock.pop(fd)
    rec = spares[pidfd]
    poller.unregister(fd)
    try:
        msg = rec[1].recv(4096)
    except OSError:
        msg = b""
    if msg.startswith(b"ok "):
        rec[3] = True
        rec[4] = [ctl for ctl in msg[3:].decode().split(",") if ctl]
        ready.append(pidfd)
        failed["count"] = 0
    else:
        failed["count"] += 1
        failed["error"] = msg.decode("utf-8", "replace") or "a spare ended before it was ready"


def forget_spare(pidfd):
    # A spare that ended before it had a test (it failed, or was killed).
    pid, sock, slot, was_ready, _ = spares.pop(pidfd)
    if sock.fileno() in by_sock:
        poller.unregister(sock)
        del by_sock[sock.fileno()]
    if was_ready:
        ready.remove(pidfd)
    SPARE_SOCKS.remove(sock)
    sock.close()
    poller.unregister(pidfd)
    os.close(pidfd)
    os.waitpid(pid, 0)
    free_slots.append(slot)


def dispatch(req, fds):
    pidfd = ready.popleft()
    pid, sock, slot, _, controllers = spares.pop(pidfd)
    try:
        socket.send_fds(sock, [json.dumps({"main": req.get("main")}).encode()], fds)
        rid = req["id"]
    except OSError:
        os.kill(pid, signal.SIGKILL)
        queue.appendleft((req, fds))
        fds, rid = [], None  # reaped like a test, answered to no one
    SPARE_SOCKS.remove(sock)
    sock.close()
    for f in fds:
        os.close(f)
    running[pidfd] = [rid, pid, time.monotonic() + req.get("wall_s", 10.0), False, slot, controllers]


def finish(pidfd):
    rid, pid, _, timed_out, slot, controllers = running.pop(pidfd)
    poller.unregister(pidfd)
    os.close(pidfd)
    _, st = os.waitpid(pid, 0)
    free_slots.append(slot)
    if rid is not None:
        send(CTL, {"id": rid, "status": os.waitstatus_to_exitcode(st), "timed_out": timed_out, "cgroups": controllers})


def refuse(req, fds, reason):
    if len(fds) > 1:
        sandbox_error(fds[1], reason)
    for f in fds:
        os.close(f)
    send(CTL, {"id": req["id"], "status": 125, "timed_out": False, "cgroups": []})


def shut_down():
    # The scoring process is gone (maybe without cleaning up): end every test and spare, remove their cgroups.
    for pidfd, rec in list(spares.items()) + list(running.items()):
        os.kill(rec[1] if pidfd in running else rec[0], signal.SIGKILL)
    for pid in [rec[0] for rec in spares.values()] + [rec[1] for rec in running.values()]:
        os.waitpid(pid, 0)
    for root in CONF["cgroups"].values():
        for name in os.listdir(root):
            if name.startswith(CONF["prefix"] + "-"):
                try:
                    os.rmdir(os.path.join(root, name))
                except OSError:
                    pass


def take_request():
    msg, fds = receive(CTL)
    if not msg:
        return False
    req = json.loads(msg)
    if req.get("op") == "preload":
        try:
            PROGRAMS[req["key"]] = compile(req["source"], req["name"], "exec")
        except (SyntaxError, ValueError):
            pass  # each run compiles it from its file, and reports the error itself
        gc.freeze()
    elif len(fds) != 4:
        refuse(req, fds, "a request needs 4 fds, got %d" % len(fds))
    else:
        queue.append((req, fds))
    return True


def serve():
    # The first spare doubles as the check that this host lets us make a test's namespaces.
    first = new_spare()
    deadline = time.monotonic() + 20
    while first is not None and not failed["count"] and not spares[first][3] and time.monotonic() < deadline:
        for fd, _ in poller.poll(200):
            if fd in by_sock:
                spare_said(fd)
    if first is None or failed["count"] or not spares[first][3]:
        send(CTL, {"ready": False, "error": failed["error"] or "no test process could be set up"})
        return
    send(CTL, {"ready": True})
    poller.register(CTL, select.POLLIN)
    gc.collect()
    gc.freeze()  # forks then leave the zygote's objects alone: fewer pages copied per test
    try:
        loop()
    finally:
        shut_down()


def loop():
    while True:
        now = time.monotonic()
        for run in running.values():
            if not run[3] and now >= run[2]:
                os.kill(run[1], signal.SIGKILL)  # the test's PID 1: the kernel kills everything it started
                run[3] = True
        waits = [run[2] - now for run in running.values() if not run[3]]
        events = poller.poll(max(0.0, min(waits)) * 1000 + 1 if waits else None)
        # fds are only opened after the whole batch, so a number in it still means what it meant
        for fd, _ in events:
            if fd == CTL.fileno():
                if not take_request():
                    return
            elif fd in running:
                finish(fd)
            elif fd in by_sock:
                spare_said(fd)
            elif fd in spares:
                forget_spare(fd)
        while queue and ready:
            dispatch(*queue.popleft())
        if failed["count"] >= 3:
            return  # spares keep failing: the scoring process starts another zygote, or runs without one
        while len(spares) < CONF["spares"]:
            if new_spare() is None:
                break


serve()
"""

_READY_TIMEOUT_S = 30.0
_SPARES = max(2, min(os.cpu_count() or 1, 8))
"""Run processes a zygote keeps set up ahead (namespaces, mounts, cgroup slot), each waiting for its run."""
_BACKSTOP_S = 15.0
"""How long past a run's own wall limit the scoring process waits for its answer before it replaces the zygote."""
_PRELOAD_MAX = 256 << 10
"""A trusted main script larger than this is compiled in each run instead (it must fit in one message)."""


class _ServerDied(Exception):
    """The zygote went away while a run was in flight; the run is started again."""


class _Waiter:
    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.result: dict[str, Any] | None = None


class _ForkServer:
    """One zygote inside its namespaces, shared by every thread of this process; see the module docstring."""

    def __init__(self, info: dict[str, Any]):
        self.info = info
        self._lock = threading.Lock()
        self._pending: dict[int, _Waiter] = {}
        self._ids = itertools.count(1)
        self._preloaded: set[str] = set()
        self.alive = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self._cgroup_roots = {ctl: str(Path(_CGROUP_ROOTS[ctl]) / "qualitycheck") for ctl in info["cgroups"]}
        self._prefix = f"zygote-{uuid.uuid4().hex[:12]}"
        conf = {
            "cgroups": self._cgroup_roots,
            "prefix": self._prefix,
            "mounts": list(_TMPFS_DIRS),
            "disk_bytes": Limits().disk_bytes,
            "spares": _SPARES,
        }
        cmd = [*info["unshare"], "--", info["program_python"], "-I", "-B", "-c", _ZYGOTE, str(theirs.fileno()), json.dumps(conf)]
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(),),
                env={"PATH": _SAFE_PATH, "LANG": "C.UTF-8"},
                cwd="/",
                start_new_session=True,
            )
        finally:
            theirs.close()
        hello = self._hello()
        if not hello.get("ready"):
            self.kill()
            self._sock.close()
            err = self.proc.stderr.read().decode("utf-8", "replace")[-500:] if self.proc.stderr else ""
            raise OSError(f"the sandbox's fork server did not start: {hello.get('error') or err.strip() or 'no answer'}")
        if self.proc.stderr:
            self.proc.stderr.close()  # nothing more is read from it; a write there fails instead of filling a pipe
        self.alive = True
        threading.Thread(target=self._read, name="qc-sandbox-server", daemon=True).start()

    @property
    def zygote_pid(self) -> int | None:
        """The zygote's host pid (the child of `unshare`), for tests that kill it."""
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def _hello(self) -> dict[str, Any]:
        ready = select.select([self._sock], [], [], _READY_TIMEOUT_S)[0]
        if not ready:
            return {}
        data = self._sock.recv(65536)
        try:
            msg = json.loads(data) if data else {}
        except ValueError:
            return {}
        return msg if isinstance(msg, dict) else {}

    def _read(self) -> None:
        try:
            while True:
                data = self._sock.recv(65536)
                if not data:
                    break
                msg = json.loads(data)
                with self._lock:
                    waiter = self._pending.pop(int(msg["id"]), None)
                if waiter:
                    waiter.result = msg
                    waiter.event.set()
        except (OSError, ValueError, KeyError):
            pass
        finally:
            self._died()

    def _died(self) -> None:
        with self._lock:
            self.alive = False
            pending, self._pending = self._pending, {}
            self._sock.close()
        for waiter in pending.values():
            waiter.event.set()  # result None: the server died under it

    def run(self, fds: list[int], wall_s: float, main: tuple[str, str] | None) -> dict[str, Any] | None:
        """Send one run; the zygote's answer, None when it did not come in time.

        `fds` are the run's configuration, report, stdout and stderr memfds;
        `main` is (name, source) of a trusted main script to compile once.
        Raises `_ServerDied` when the zygote is gone before or during the run.
        """
        waiter = _Waiter()
        with self._lock:
            if not self.alive:
                raise _ServerDied()
            rid = next(self._ids)
            self._pending[rid] = waiter
            key = None
            try:
                if main is not None and len(main[1]) <= _PRELOAD_MAX:
                    key = hashlib.sha256(f"{main[0]}\0{main[1]}".encode()).hexdigest()
                    if key not in self._preloaded:
                        self._sock.send(json.dumps({"op": "preload", "key": key, "name": main[0], "source": main[1]}).encode())
                        self._preloaded.add(key)
                socket.send_fds(self._sock, [json.dumps({"id": rid, "wall_s": wall_s, "main": key}).encode()], fds)
            except OSError:
                self._pending.pop(rid, None)
                self.alive = False
                raise _ServerDied() from None
        if not waiter.event.wait(wall_s + _BACKSTOP_S):
            with self._lock:
                self._pending.pop(rid, None)
            return None
        if waiter.result is None:
            raise _ServerDied()
        return waiter.result

    def kill(self, grace_s: float = 0.0) -> None:
        """End the zygote and everything in its namespaces (their runs see `_ServerDied`).

        With `grace_s`, first close our end of the socket and give the zygote
        that long to exit by itself (it then is reaped by `unshare`, whose exit
        we reap); SIGKILL to the whole process group otherwise.
        """
        self.alive = False
        if grace_s:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            try:
                self.proc.wait(grace_s)
                self._remove_cgroups()
                return
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """This zygote's cgroup slots, once it is gone (it removes them itself when it can)."""
        for root in self._cgroup_roots.values():
            _Cgroup.existing(list(Path(root).glob(f"{self._prefix}-*"))).close()


_servers_lock = threading.Lock()
_servers: dict[tuple[Any, ...], _ForkServer] = {}
_no_server: dict[tuple[Any, ...], str] = {}


def _server_key(info: dict[str, Any]) -> tuple[Any, ...]:
    return (tuple(info["unshare"]), info["program_python"], tuple(info["cgroups"]))


def _server_for(info: dict[str, Any], replace: _ForkServer | None = None) -> _ForkServer | None:
    """The live fork server for this isolation, started on first use; None when none can start here."""
    key = _server_key(info)
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and (server is replace or not server.alive or server.proc.poll() is not None):
            server.kill()
            del _servers[key]
            server = None
        if server is None:
            if key in _no_server:
                return None
            try:
                server = _servers[key] = _ForkServer(info)
            except OSError as exc:
                _no_server[key] = str(exc)
                print(f"qualitycheck: note: {exc}; each unit test starts its own sandbox instead (same isolation, slower)", file=sys.stderr)
                return None
        return server


def _stop_servers() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.kill(grace_s=1.0)


def _forget_servers_in_child() -> None:
    """A forked copy of this process must not talk to its parent's zygotes (their answers go to the parent)."""
    global _servers_lock
    _servers_lock = threading.Lock()
    for server in _servers.values():
        server.alive = False
        server._sock.close()
    _servers.clear()


atexit.register(_stop_servers)
os.register_at_fork(after_in_child=_forget_servers_in_child)


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(f"qc-sandbox-{name}", os.MFD_CLOEXEC)
    if data:
        os.write(fd, data)
    return fd


def _pread_all(fd: int, cap: int) -> bytes:
    chunks, pos = [], 0
    while pos < cap:
        chunk = os.pread(fd, min(1 << 20, cap - pos), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def _capped_text(fd: int, cap: int) -> str:
    data = _pread_all(fd, cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    return text + "\n[... output cut]" if len(data) > cap else text


def _run_forked(
    server: _ForkServer, files: dict[str, str], argv: list[str], limits: Limits, info: dict[str, Any], trusted_main: bool
) -> SandboxResult:
    """One run on a spare of the zygote; raises `_ServerDied` when the zygote went away under it."""
    cfg = {
        "cgroup_limits": _cgroup_limits(limits),
        "disk_bytes": limits.disk_bytes,
        "work": "/tmp/sandbox",
        "files": files,
        "uid": NOBODY if info["drop_to_nobody"] else None,
        "rlimits": _rlimits(limits, per_run_pids=True),
        "nproc_without_pids_cgroup": _rlimits(limits, per_run_pids=False)["RLIMIT_NPROC"],
        "path": _SAFE_PATH,
        "argv": argv,
    }
    fds = [_memfd("config", json.dumps(cfg).encode()), _memfd("report"), _memfd("stdout"), _memfd("stderr")]
    try:
        start = time.monotonic()
        answer = server.run(fds, limits.wall_s, (argv[0], files[argv[0]]) if trusted_main else None)
        wall = time.monotonic() - start
        if answer is None:  # no answer: the zygote is wedged; replace it (its tests in flight run again)
            _server_for(info, replace=server)
            answer = {"status": None, "timed_out": True, "cgroups": info["cgroups"]}
        timed_out = bool(answer.get("timed_out"))
        return SandboxResult(
            exit_code=None if timed_out else answer.get("status"),
            timed_out=timed_out,
            report=_parse_report(_pread_all(fds[1], limits.file_bytes + 1)),
            stdout=_capped_text(fds[2], limits.output_bytes),
            stderr=_capped_text(fds[3], limits.output_bytes),
            isolation=info["level"],
            isolation_detail=_detail(info, [str(c) for c in answer.get("cgroups") or []]),
            wall_s=round(wall, 3),
        )
    finally:
        for fd in fds:
            os.close(fd)


def run_python(files: dict[str, str], argv: list[str], limits: Limits = Limits(), *, trusted_main: bool = False) -> SandboxResult:
    """Run `python -I -B *argv` in a fresh dir holding `files`, isolated as well as this host allows.

    The program gets a report file descriptor, whose number is appended to
    `argv`; whatever JSON it writes there is returned as `report`. A program
    that exits (or is killed) before writing it has `report=None`. Safe to
    call from many threads at once.

    `trusted_main`: `files[argv[0]]` is the caller's own program, never
    model-written, so a fork server may compile it once and keep the code
    in its zygote for every later run (the file is still written).
    """
    info = isolation()
    # Only where runs drop to nobody: under `--map-root-user` every run would be root of the zygote's one
    # user namespace, and share what is kept per user namespace (its keyrings); a run of its own gets one.
    if info["level"] == "namespaces" and info["unshare"]:
        server = _server_for(info)
        for _ in range(2):  # a zygote that dies under a test is replaced and the test run again, once
            if server is None:
                break
            try:
                return _run_forked(server, files, argv, limits, info, trusted_main)
            except _ServerDied:
                server = _server_for(info, replace=server)
    return _run_fresh(files, argv, limits, info)
