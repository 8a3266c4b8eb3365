"""bench/run.py ended by SIGKILL (a CI timeout, a closed terminal) leaves no process behind and no port bound."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file() or sys.platform != "linux", reason="reads /proc (Linux)")


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, parent pid, start time) of a process; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """Every process below `root` now, from /proc's parent links, with its start time (which tells it from a reused pid)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (sp := _stat(int(entry.name))) is not None:
            children.setdefault(sp[1], []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid: st[2] for pid in found if (st := _stat(pid)) is not None}


def _listening_ports(pids: set[int]) -> set[int]:
    """TCP ports these processes listen on: their socket inodes matched with /proc/net/tcp{,6} rows in state LISTEN."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def _alive(pid: int, started: int) -> bool:
    st = _stat(pid)
    return st is not None and st[2] == started and st[0] not in ("Z", "X")  # a zombie holds no port and runs nothing


def test_a_sigkilled_bench_takes_every_process_it_started_with_it() -> None:
    """The shadow section has the most at once (the bench server, the proxy, the pass-through, the relay, the load generator).

    The kill comes once at least three of them listen, i.e. mid-section;
    afterwards none of the processes seen may run on, and nothing may
    listen on their ports.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--only", "shadow"]
    bench = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, int] = {}
    ports: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while len(ports) < 3:
            assert bench.poll() is None, f"the bench ended first: {bench.stderr.read().decode()[-2000:] if bench.stderr else ''}"
            assert time.monotonic() < deadline, f"the section's processes did not start: {sorted(seen)}"
            now = _descendants(bench.pid)
            seen |= now
            ports |= _listening_ports(set(now))
            time.sleep(0.1)
        seen |= _descendants(bench.pid)
        bench.send_signal(signal.SIGKILL)
        bench.wait(30)
        deadline = time.monotonic() + 20
        while (survivors := {p for p, t in seen.items() if _alive(p, t)}) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for pid, started in seen.items():  # the test's own clean-up, so that a failure does not leave them running either
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        if bench.poll() is None:
            bench.kill()
    assert not survivors, f"still running after the bench was killed: {sorted(survivors)} of {sorted(seen)}"
    for port in ports:
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", port))
