"""The sandbox's fork server: every test a fresh fork of a clean zygote, whatever the test before it did.

The zygote is reused for speed, so these tests check what reuse must not
change: nothing one test does reaches another (files, modules, environment),
the zygote never holds a test's code, a killed zygote is replaced (and the
test it was running is run again), a timeout kills the test's whole process
tree, threads get their own results, and no zygote outlives the process that
started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from qualitycheck.scoring import _sandbox
from qualitycheck.scoring._sandbox import Limits, SandboxResult, run_python

pytestmark = pytest.mark.skipif(
    _sandbox.isolation()["level"] != "namespaces", reason="runs use a fork server only with namespaces and the drop to nobody"
)

REPORT = "import json, os, sys\n\ndef report(d):\n    os.write(int(sys.argv[-1]), json.dumps(d).encode())\n\n"
ALLOC = "try:\n    b = bytearray(300 << 20)\n    report({'got': True})\nexcept MemoryError:\n    report({'got': False})\n"


def run(body: str, wall_s: float = 5.0) -> SandboxResult:
    """`body` runs after REPORT's `report()` helper, as the sandbox's main script."""
    return run_python({"main.py": REPORT + body}, ["main.py"], Limits(wall_s=wall_s))


def server() -> _sandbox._ForkServer:
    s = _sandbox._server_for(_sandbox.isolation())
    assert s is not None, _sandbox._no_server
    return s


def processes_with(marker: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    out.append(int(p.name))
            except OSError:
                continue
    return out


def gone(pid: int, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_state_of_one_test_is_not_seen_by_the_next_one_on_the_same_server() -> None:
    zygote = server().zygote_pid
    first = run(
        "import math, string, re\n"
        "for d in ('/tmp/sandbox', '/tmp', '/dev/shm', '/var/tmp'):\n"
        "    try:\n"
        "        open(d + '/left-behind', 'w').write('x')\n"
        "    except OSError:\n"
        "        pass\n"
        "math.pi = 3\n"
        "string.ascii_letters = 'patched'\n"
        "re.compile = None\n"
        "sys.modules['planted'] = math\n"
        "os.environ['LEAKED'] = 'yes'\n"
        "os.putenv('LEAKED_TOO', 'yes')\n"
        "report({'pi': math.pi, 'wrote': os.path.exists('/tmp/sandbox/left-behind')})\n"
    )
    assert first.report == {"pi": 3, "wrote": True}, first
    second = run(
        "import math, string, re, glob\n"
        "report({'pi': math.pi, 'letters': string.ascii_letters[:3], 're': callable(re.compile),\n"
        "        'planted': 'planted' in sys.modules, 'env': sorted(os.environ),\n"
        "        'files': glob.glob('/tmp/**/left-behind', recursive=True) + glob.glob('/dev/shm/*')\n"
        "                 + glob.glob('/var/tmp/*')})\n"
    )
    assert second.report == {
        "pi": 3.141592653589793,
        "letters": "abc",
        "re": True,
        "planted": False,
        "env": ["HOME", "LANG", "PATH", "TMPDIR"],
        "files": [],
    }, second
    assert server().zygote_pid == zygote  # both ran on the same zygote


def test_a_test_holds_no_descriptor_of_the_server_or_of_other_tests() -> None:
    r = run("report({'fds': sorted(int(f) for f in os.listdir('/proc/self/fd'))})")
    assert r.report is not None
    assert set(r.report["fds"]) <= {0, 1, 2, 3, 4}, r  # stdin/out/err, the report fd, listdir's own fd


def test_tests_running_at_once_cannot_reach_each_other() -> None:
    """Each test has its own network namespace (abstract unix sockets live there) and its own PID namespace."""
    name = f"qc-rendezvous-{uuid.uuid4().hex}"
    listener: list[SandboxResult] = []
    t = threading.Thread(
        target=lambda: listener.append(
            run(
                "import socket\n"
                "s = socket.socket(socket.AF_UNIX)\n"
                f"s.bind('\\0{name}')\n"
                "s.listen(1)\n"
                "s.settimeout(3)\n"
                "try:\n"
                "    s.accept()\n"
                "    report({'reached': True})\n"
                "except socket.timeout:\n"
                "    report({'reached': False})\n"
            )
        )
    )
    t.start()
    time.sleep(1)
    caller = run(
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect('\\0{name}')\n"
        "    report({'connected': True})\n"
        "except OSError as exc:\n"
        "    report({'connected': False, 'error': type(exc).__name__,\n"
        "            'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())})\n"
    )
    t.join(30)
    assert caller.report == {"connected": False, "error": "ConnectionRefusedError", "pids": [1]}, caller
    assert listener and listener[0].report == {"reached": False}, listener


def test_a_tests_code_never_reaches_the_zygote() -> None:
    """Later forks copy the zygote's memory, so what a test sends must not pass through it."""
    marker = f"qc-secret-{uuid.uuid4().hex}"
    r = run(f"x = {marker!r}\nreport({{'ok': True}})")
    assert r.report == {"ok": True}
    pid = server().zygote_pid
    assert pid is not None
    found = False
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            addr, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(start)
                if marker.encode() in mem.read(end - start):
                    found = True
            except (OSError, OverflowError, ValueError):
                continue
    assert not found


def test_a_killed_zygote_is_replaced() -> None:
    old = server()
    pid = old.zygote_pid
    assert pid is not None and run("report({'n': 1})").report == {"n": 1}
    os.kill(pid, signal.SIGKILL)
    assert gone(pid)
    assert run("report({'n': 2})").report == {"n": 2}
    new = server()
    assert new is not old and new.zygote_pid not in (None, pid)


def test_a_test_in_flight_when_its_zygote_dies_is_run_again() -> None:
    results: list[SandboxResult] = []
    t = threading.Thread(target=lambda: results.append(run("import time\ntime.sleep(1.5)\nreport({'done': True})")))
    pid = server().zygote_pid
    assert pid is not None
    t.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    t.join(30)
    assert results and results[0].report == {"done": True} and not results[0].timed_out, results


def test_a_timeout_kills_the_whole_process_tree_of_the_test() -> None:
    marker = f"qc-tree-{uuid.uuid4().hex}"
    sleeper = (
        f"import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        f"signal.signal(signal.SIGHUP, signal.SIG_IGN)\\ntime.sleep(10**6)  # {marker}"
    )
    r = run(
        "import subprocess, time\n"
        "for session in (False, True):\n"
        f"    subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=session,\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(10**6)\n"
        "time.sleep(10**6)\n",
        wall_s=1.5,
    )
    assert r.timed_out and r.exit_code is None, r
    for _ in range(50):
        if not processes_with(marker):
            break
        time.sleep(0.05)
    assert processes_with(marker) == []
    for ctl in _sandbox.isolation()["cgroups"]:  # the run's cgroup is empty: only spares (one process each) are left
        root = Path(_sandbox._CGROUP_ROOTS[ctl]) / "qualitycheck"
        procs = [(p / "cgroup.procs").read_text().split() for p in root.glob(f"{server()._prefix}-*")]
        assert all(len(p) <= 1 for p in procs) and sum(map(len, procs)) <= _sandbox._SPARES, procs


def test_threads_each_get_their_own_result() -> None:
    def one(i: int) -> tuple[int, SandboxResult]:
        kind = i % 4
        if kind == 0:
            return i, run(f"print('out {i}')\nreport({{'i': {i}}})")
        if kind == 1:
            return i, run(f"import time\ntime.sleep(0.2)\nreport({{'i': {i}, 'pid': os.getpid()}})")
        if kind == 2:
            return i, run(f"print('err {i}', file=sys.stderr)\nsys.exit({i % 100})")
        return i, run("while True:\n    pass\n", wall_s=1)

    got: dict[int, SandboxResult] = {}
    lock = threading.Lock()

    def worker(ids: list[int]) -> None:
        for i in ids:
            k, r = one(i)
            with lock:
                got[k] = r

    threads = [threading.Thread(target=worker, args=([i for i in range(24) if i % 6 == w],)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(got) == list(range(24))
    for i, r in got.items():
        kind = i % 4
        if kind == 0:
            assert r.report == {"i": i} and r.stdout == f"out {i}\n" and r.exit_code == 0, (i, r)
        elif kind == 1:
            assert r.report == {"i": i, "pid": 1}, (i, r)  # each test is PID 1 of its own namespace
        elif kind == 2:
            assert r.report is None and r.exit_code == i % 100 and r.stderr == f"err {i}\n", (i, r)
        else:
            assert r.timed_out and r.report is None, (i, r)


def test_per_test_limits_apply_to_each_test() -> None:
    big = run(ALLOC)
    small = run_python({"main.py": REPORT + ALLOC}, ["main.py"], Limits(memory_bytes=128 << 20))
    assert big.report == {"got": True} and small.report == {"got": False}, (big, small)
    disk = run_python(
        {"main.py": REPORT + "import shutil\nreport({'total': shutil.disk_usage('/tmp').total})\n"}, ["main.py"], Limits(disk_bytes=8 << 20)
    )
    assert disk.report == {"total": 8 << 20}, disk
    procs = run_python({"main.py": REPORT + "report({'max': open('/proc/self/limits').read()})\n"}, ["main.py"], Limits(open_files=17))
    assert procs.report is not None and "Max open files            17" in procs.report["max"], procs


def test_a_host_without_a_working_zygote_runs_each_test_on_its_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_sandbox, "_servers", {})
    monkeypatch.setattr(_sandbox, "_no_server", {})
    monkeypatch.setattr(_sandbox, "_ZYGOTE", "import sys\nsys.exit('this zygote cannot start')")
    r = run("import socket\nreport({'pid': os.getpid(), 'net': [name for _, name in socket.if_nameindex()]})")
    assert r.report is not None and r.report["pid"] == 1 and r.report["net"] == ["lo"], r
    assert r.isolation_detail == {
        "network": True,
        "pid_namespace": True,
        "private_tmp": True,
        "uid": "nobody" if _sandbox.isolation()["drop_to_nobody"] else "mapped-root",
        "cgroups": _sandbox.isolation()["cgroups"],
    }
    assert "this zygote cannot start" in capsys.readouterr().err


def test_the_harness_is_compiled_once_and_gives_the_same_result() -> None:
    files = {"main.py": REPORT + "report({'file': __file__, 'name': __name__, 'argv': sys.argv[:-1]})\n"}
    plain = run_python(files, ["main.py", "x"])
    cached = [run_python(files, ["main.py", "x"], trusted_main=True) for _ in range(2)]
    assert plain.report == cached[0].report == cached[1].report == {"file": "main.py", "name": "__main__", "argv": ["main.py", "x"]}


@pytest.mark.parametrize("how", ["exits", "dies without atexit"])
def test_no_zygote_outlives_the_process_that_started_it(how: str) -> None:
    end = "sys.stdout.flush(); os._exit(0)" if how == "dies without atexit" else "sys.stdout.flush()"
    code = (
        "import os, sys\n"
        "from qualitycheck.scoring import _sandbox\n"
        "r = _sandbox.run_python({'m.py': 'pass'}, ['m.py'])\n"
        "s = list(_sandbox._servers.values())[0]\n"
        "print(s.proc.pid, s.zygote_pid, s._prefix)\n" + end
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
    unshare, zygote, prefix = out.stdout.split()
    assert gone(int(zygote)) and gone(int(unshare)), out
    roots = [Path(_sandbox._CGROUP_ROOTS[ctl]) / "qualitycheck" for ctl in _sandbox.isolation()["cgroups"]]
    assert [p for root in roots for p in root.glob(f"{prefix}-*")] == []  # nor the cgroups of its spares


def test_exit_status_and_output_match_a_fresh_interpreter() -> None:
    body = (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
        "print('main done')\n"
        "raise ValueError('boom')\n"
    )
    forked = run(body)
    monkey = pytest.MonkeyPatch()
    try:
        monkey.setattr(_sandbox, "_server_for", lambda info, replace=None: None)
        fresh = run(body)
    finally:
        monkey.undo()
    for r in (forked, fresh):
        assert r.exit_code == 1 and r.stdout == "main done\nthread done\natexit ran\n", r
        assert r.stderr.rstrip().endswith("ValueError: boom"), r


def test_a_trusted_main_that_does_not_compile_fails_the_run_not_the_server() -> None:
    pid = server().zygote_pid
    broken = run_python({"main.py": "def (:\n"}, ["main.py"], trusted_main=True)
    assert broken.report is None and broken.exit_code == 1 and "SyntaxError" in broken.stderr, broken
    assert run("report({'ok': True})").report == {"ok": True}
    assert server().zygote_pid == pid


def test_user_namespace_runs_each_get_their_own_and_no_fork_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under --map-root-user, runs forked from one zygote would share its user namespace (and keyrings)."""
    real = _sandbox.isolation()
    forced = {
        **real,
        "level": "user-namespaces",
        "unshare": ["unshare", "--user", "--map-root-user", *_sandbox._UNSHARE_NS],
        "drop_to_nobody": False,
        "program_python": _sandbox._unmasked_python(sys.executable),
        "cgroups": [],
        "weak": False,
    }
    if not _sandbox._works([*forced["unshare"], "--", "true"]):
        pytest.skip("user namespaces are not available here")
    monkeypatch.setattr(_sandbox, "_probed", forced)
    monkeypatch.setattr(_sandbox, "_servers", {})
    userns = "import os\nreport({'userns': os.readlink('/proc/self/ns/user'), 'uid': os.getuid()})"
    first, second = run(userns), run(userns)
    assert first.report and second.report and first.report["uid"] == 0, (first, second)
    assert first.report["userns"] != second.report["userns"]
    assert _sandbox._servers == {}
