"""What the machine did while the end-to-end tests ran: pauses, steal, pressure, free memory.

The e2e tests wait on real servers with wall-clock limits. When one of them runs
out of time, the question is whether the code under test was slow or the
machine stopped running it: a virtual machine whose host is busy pauses every
process at once (the guest's clocks jump on resume), and a machine short of
memory or disk bandwidth stalls fresh processes on page faults. A thread samples
the kernel once a second and charges what it sees to the test running at the
time; the session's summary names the tests during which the machine stalled,
so a CI failure carries the evidence either way. It also names what sets
pytest's share of the CPU (niceness, autogroup, cgroup) and the processor.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

PERIOD_S = 1.0
PAUSE_S = 3.0
"""A one-second sleep of the sampling thread that returned this much later: the thread was not run for that
long (the host paused the machine, the kernel did not schedule pytest, or another thread held the
interpreter); `steal` beside it tells the host's part."""

STALL_S = 60.0
"""Seconds of pauses, or of PSI full pressure on the disk or memory, in one stretch that mean the machine stalled."""

TICK_S = 1 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


@dataclass
class Sample:
    """Cumulative kernel counters at one moment; differences between two samples are what happened between.

    A counter that cannot be read keeps the value of the sample before
    (`now(previous)`), so a failed read never charges a counter's whole
    total since boot to one test; with no reading yet it stays None.
    """

    steal_s: float | None = None
    io_full_s: float | None = None
    memory_full_s: float | None = None
    cpu_some_s: float | None = None
    available_mb: float | None = None

    @classmethod
    def now(cls, previous: Sample | None = None) -> Sample:
        before = previous or cls()
        return cls(
            steal_s=_or(_steal(), before.steal_s),
            io_full_s=_or(_psi("io", "full"), before.io_full_s),
            memory_full_s=_or(_psi("memory", "full"), before.memory_full_s),
            cpu_some_s=_or(_psi("cpu", "some"), before.cpu_some_s),
            available_mb=_available_mb(),
        )


def _or(value: float | None, before: float | None) -> float | None:
    return value if value is not None else before


def _delta(after: float | None, before: float | None) -> float:
    return after - before if after is not None and before is not None else 0.0


def _steal() -> float | None:
    """Seconds (cumulative) the host ran something else while this machine's CPUs wanted to run, from /proc/stat."""
    try:
        return int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[8]) * TICK_S
    except (OSError, IndexError, ValueError):
        return None


def _available_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return None


def _psi(resource: str, kind: str) -> float | None:
    """Seconds (cumulative) some or all tasks waited on `resource`, from /proc/pressure; None where PSI is off."""
    try:
        for line in Path(f"/proc/pressure/{resource}").read_text().splitlines():
            if line.startswith(kind):
                return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, IndexError, ValueError):
        pass
    return None


@dataclass
class Span:
    """What the machine did during one test."""

    name: str
    wall_s: float = 0.0
    pauses: list[float] = field(default_factory=list)
    steal_s: float = 0.0
    io_full_s: float = 0.0
    memory_full_s: float = 0.0
    cpu_some_s: float = 0.0
    least_available_mb: float = float("inf")

    def copy(self) -> Span:
        """The span as it stands: `since` takes what was charged after it."""
        return replace(self, pauses=list(self.pauses))

    def since(self, earlier: Span) -> Span:
        """What was charged to this span after `earlier` (a `copy` of it): the stretch between the two."""
        return Span(
            f"{self.name} (the last {self.wall_s - earlier.wall_s:.0f} s)",
            wall_s=self.wall_s - earlier.wall_s,
            pauses=self.pauses[len(earlier.pauses) :],
            steal_s=self.steal_s - earlier.steal_s,
            io_full_s=self.io_full_s - earlier.io_full_s,
            memory_full_s=self.memory_full_s - earlier.memory_full_s,
            cpu_some_s=self.cpu_some_s - earlier.cpu_some_s,
            least_available_mb=self.least_available_mb,
        )

    def stalled(self) -> bool:
        """Whether the machine, not the code under test, stopped for minutes: the sampling thread not run (see
        `PAUSE_S`), or every task waiting on the disk or on memory (PSI "full"), a minute in all or more."""
        return sum(self.pauses) >= STALL_S or self.io_full_s >= STALL_S or self.memory_full_s >= STALL_S

    def notable(self) -> bool:
        return bool(self.pauses) or self.io_full_s > 5 or self.memory_full_s > 1 or self.steal_s > max(5.0, 0.1 * self.wall_s)

    def describe(self) -> str:
        paused = (
            f"paused {len(self.pauses)}x (longest {max(self.pauses):.0f} s, {sum(self.pauses):.0f} s in all)" if self.pauses else "no pause"
        )
        return (
            f"{self.name}: {self.wall_s:.0f} s, {paused}, steal {self.steal_s:.1f} s, io full {self.io_full_s:.1f} s, "
            f"memory full {self.memory_full_s:.1f} s, cpu some {self.cpu_some_s:.0f} s, least available "
            + (f"{self.least_available_mb:.0f} MB" if self.least_available_mb != float("inf") else "not read")
        )


class MachineWatch:
    """A daemon thread that charges the kernel's counters, once a second, to the test running at the time."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.spans: list[Span] = []
        self._current = Span("(between tests)")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="machine-watch", daemon=True)

    def start(self) -> MachineWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.begin("(end)")

    def begin(self, name: str) -> Span:
        """Start charging to `name`; the span charged so far is kept."""
        with self._lock:
            if self._current.wall_s:
                self.spans.append(self._current)
            self._current = Span(name)
            return self._current

    def _run(self) -> None:
        before, t0 = Sample.now(), time.monotonic()
        while not self._stop.wait(self.period_s):
            after, t1 = Sample.now(before), time.monotonic()
            with self._lock:
                span = self._current
                span.wall_s += t1 - t0
                if t1 - t0 > self.period_s + PAUSE_S:
                    span.pauses.append(t1 - t0 - self.period_s)
                span.steal_s += _delta(after.steal_s, before.steal_s)
                span.io_full_s += _delta(after.io_full_s, before.io_full_s)
                span.memory_full_s += _delta(after.memory_full_s, before.memory_full_s)
                span.cpu_some_s += _delta(after.cpu_some_s, before.cpu_some_s)
                if after.available_mb is not None:
                    span.least_available_mb = min(span.least_available_mb, after.available_mb)
            before, t0 = after, t1

    def report(self) -> list[str]:
        """One line for the whole session, then one for each test during which the machine stalled."""
        with self._lock:
            spans = [*self.spans, self._current] if self._current.wall_s else list(self.spans)
        if not spans:
            return []
        total = Span(f"machine during the e2e tests ({os.cpu_count()} cores)")
        for s in spans:
            total.wall_s += s.wall_s
            total.pauses += s.pauses
            total.steal_s += s.steal_s
            total.io_full_s += s.io_full_s
            total.memory_full_s += s.memory_full_s
            total.cpu_some_s += s.cpu_some_s
            total.least_available_mb = min(total.least_available_mb, s.least_available_mb)
        return [total.describe(), "  " + cpu_standing(), "  " + cpu_model()] + ["  " + s.describe() for s in spans if s.notable()]


def cpu_standing(pid: int = 0) -> str:
    """What decides the CPU share of `pid` (0: pytest) against other processes: its niceness, the kernel's
    autogroup (one per session, with a niceness of its own), the cores it may run on, its cgroup's weight and quota.

    A session whose autogroup runs at a lower priority than busy servers in other sessions gets almost no CPU,
    whatever each process's niceness says; this line shows when that is the case."""
    proc = Path(f"/proc/{pid or 'self'}")

    def read(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError:
            return "none"

    v2 = [line[3:] for line in read(proc / "cgroup").splitlines() if line.startswith("0::")]
    if v2:
        cg = Path("/sys/fs/cgroup") / v2[0].lstrip("/")
        cgroup = f"cgroup {v2[0]} (cpu.weight {read(cg / 'cpu.weight')}, cpu.max {read(cg / 'cpu.max')})"
    else:
        cgroup = "no cgroup v2"
    try:
        nice, cores = str(os.getpriority(os.PRIO_PROCESS, pid)), ",".join(map(str, sorted(os.sched_getaffinity(pid))))
    except (OSError, AttributeError):
        nice = cores = "not read"
    # the kernel prints nothing for the root autogroup: no session was made in this process's ancestry while
    # autogroups were on (the switch printed is today's); no file at all: a kernel built without them
    group = read(proc / "autogroup")
    if group in ("", "none"):
        switch = read(Path("/proc/sys/kernel/sched_autogroup_enabled"))
        group = f"root autogroup (sched_autogroup_enabled now {switch})" if group == "" else "no autogroups in this kernel"
    return f"CPU standing of {pid or 'pytest'}: nice {nice}, {group}, cores {cores}, {cgroup}"


def cpu_model() -> str:
    """The processor and the vector extensions vLLM's CPU kernels choose between: an engine's numerics, and so
    the size of a defect it shows, can differ between machines that differ here."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU: not read"
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in info.splitlines() if ":" in line)}
    flags = set(fields.get("flags", "").split())
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16") if f in flags]
    return f"CPU: {fields.get('model name', 'not named')}, {' '.join(isa) or 'no avx2'}"


def tree_cpu_s(pid: int = 0) -> float:
    """CPU seconds used by `pid` (0: pytest) and every process below it: those running now, and those it or they waited for.

    A live process's `utime` and `stime` are its own and `cutime`, `cstime` those of the children it reaped, so
    summing the four over the live tree counts every process once, whether it still runs or has ended.
    """
    total, todo, seen = 0.0, [pid or os.getpid()], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            total += sum(int(f) for f in stat[stat.rindex(")") + 2 :].split()[11:15]) * TICK_S
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # gone meanwhile: what it used is in its parent's cutime by now, or soon
            continue
    return total


@dataclass
class FileCosts:
    """Wall and CPU seconds (`tree_cpu_s`) per test file: what each costs, the CPU figure hardly moving with the
    machine's load where the wall time does."""

    wall_s: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)

    def add(self, nodeid: str, wall_s: float, cpu_s: float) -> None:
        name = nodeid.split("::", 1)[0]
        self.wall_s[name] = self.wall_s.get(name, 0.0) + wall_s
        self.cpu_s[name] = self.cpu_s.get(name, 0.0) + cpu_s

    def report(self) -> list[str]:
        if not self.wall_s:
            return []
        lines = [f"  {name}: {self.wall_s[name]:.0f} s, CPU {self.cpu_s[name]:.0f} s" for name in self.wall_s]
        total = f"{sum(self.wall_s.values()):.0f} s, CPU {sum(self.cpu_s.values()):.0f} s"
        return [f"time per e2e file (wall; CPU of pytest and every process it started): {total}", *lines]
