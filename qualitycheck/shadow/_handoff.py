"""The hand-off between the loop that carries callers' bytes and the mirror side, in one process or two.

`LocalHandoff` calls a `MirrorSide` in the same process: the library and the
in-process tests. `ProcessHandoff` is what `qualitycheck shadow` uses: the
mirror side runs in a child process (`child_main`), and the forwarding loop
writes each sampled request, and the baseline's answer as it was forwarded,
as frames on a Unix socket. A write is a non-blocking send into the socket's
buffer; the loop never waits on the child. When more than `HANDOFF_MAX_BYTES`
are waiting to be sent (a child that stalls, or cannot keep up), a sampled
request is not handed over and is counted (`dropped{reason="handoff_full"}`);
when the child is gone, the same (`mirror_down`), and callers are served as
before. The counts reach the child with the next frame, so `/qc/metrics`
(which the child answers, through the parent) keeps them.

Frames are a 4-byte length and a pickle; both ends are this module, run by
the same interpreter from the same installation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import QualitycheckError
from qualitycheck.core._records import ErrorInfo, ShadowDrain
from qualitycheck.shadow._loop import SWITCH_INTERVAL_S, log, run_loop, tune_gc
from qualitycheck.shadow._mirror import BaselineAnswer, MirrorSide
from qualitycheck.shadow._recorder import Recorder
from qualitycheck.shadow._settings import ShadowSettings
from qualitycheck.shadow._tally import ShadowMetrics

__all__ = ["HANDOFF_MAX_BYTES", "LocalHandoff", "MirrorStartError", "ProcessHandoff", "child_main"]

HANDOFF_MAX_BYTES = 16 * 2**20
"""Bytes at most waiting in the forwarding process for the mirror process; beyond, sampled requests are dropped and counted."""
COUNTS_EVERY_S = 0.25
"""How often request counts go to the mirror process when no frame carried them."""
SINK_MIRROR_NICENESS = 10
"""Added to a sink's mirror process's niceness, so the listening process, whose one job is answering the gateway, runs first.

A sink's mirror process times both targets itself, so a lower priority
delays both sides alike and the pair stays comparable. It yields to every
process of the host, not only to its sibling: on a busy host it falls
behind and drops more (`handoff_full`, `max_inflight`), and both sides'
timings read longer. The inline proxy's mirror process keeps its priority:
it times the candidate while the listening process times the baseline, so
a lower priority there reads as a slower candidate (docs/stages/shadow.md).
"""
START_TIMEOUT_S = 60.0
"""How long the mirror process may take to open its folder and scrape both targets' /metrics; past it, the start is refused (exit 2)."""
_LEN = struct.Struct("!I")
_CHILD = "from qualitycheck.shadow._handoff import child_main; child_main()"
"""The mirror process's entry point, as `python -c` runs it (a constant so that tests can give it one that never answers)."""


class MirrorStartError(QualitycheckError):
    """The mirror process refused to start (e.g. `--out` holds another run): its message, exit 2."""


class LocalHandoff:
    """The mirror side in this process: each hand-off is a call."""

    def __init__(self, side: MirrorSide):
        self.side = side

    @property
    def up(self) -> bool:
        return True

    @property
    def full(self) -> bool:
        return False

    @property
    def period(self) -> Any:
        return self.side.period

    async def start(self) -> None:
        await self.side.start()

    def count(self, kind: str) -> None:
        self.side.count({kind: 1}, {})

    def drop(self, reason: str) -> None:
        self.side.count_drop(reason)

    def request(self, case_id: str, kind: str, raw: bytes, tags: dict[str, str]) -> None:
        self.side.request(case_id, kind, raw, tags)

    def baseline_answer(self, case_id: str, answer: BaselineAnswer) -> None:
        self.side.baseline_answer(case_id, answer)

    def baseline_failed(self, case_id: str, info: ErrorInfo, started: float) -> None:
        self.side.baseline_failed(case_id, info, started)

    def caller_left(self, case_id: str, draining: bool) -> None:
        self.side.caller_left(case_id, draining)

    async def health(self, draining: bool) -> tuple[int, dict[str, Any]]:
        body = self.side.health()
        if draining:
            body["status"] = "draining"
        return (503 if draining else 200), body

    async def metrics(self) -> bytes:
        return self.side.metrics.render()

    def begin_drain(self) -> None:
        self.side.begin_drain()

    async def drain(self, timeout: float) -> ShadowDrain:
        return await self.side.drain(timeout)


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


async def _read(reader: asyncio.StreamReader) -> Any:
    """The next frame, or None at the end of the stream (the other side is gone)."""
    try:
        head = await reader.readexactly(_LEN.size)
        return pickle.loads(await reader.readexactly(_LEN.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class ProcessHandoff:
    """The forwarding process's end: starts the mirror process, writes frames to it, asks it for /qc/health and /qc/metrics."""

    def __init__(self, settings: ShadowSettings, out: Path, rules_json: str, *, replica: str, listen: str, log: Callable[[str], None]):
        self.settings = settings
        self.out = out
        self.rules_json = rules_json
        self.replica = replica
        self.listen = listen
        self.log = log
        self.own = ShadowMetrics()
        """This process's own counts (requests, drops at the hand-off): what /qc/metrics shows once the mirror process is gone."""
        self.folder: Path | None = None
        """The mirror process's folder when it last said (at start, and when it closed)."""
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._up = False
        self._requests: dict[str, int] = {}
        self._drops: dict[str, int] = {}
        self._answers: dict[int, asyncio.Future[Any]] = {}
        self._token = 0
        self._closed: asyncio.Future[Any] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def up(self) -> bool:
        return self._up

    @property
    def full(self) -> bool:
        return self._writer is not None and self._writer.transport.get_write_buffer_size() > HANDOFF_MAX_BYTES

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the mirror process and wait until its folder is open and it listens to frames (a refusal: `MirrorStartError`)."""
        ours, theirs = socket.socketpair()
        args = {
            "settings": self.settings.model_dump_json(),  # what the mirror side reads of the config, and nothing more
            "rules": self.rules_json,
            "out": str(self.out),
            "replica": self.replica,
            "listen": self.listen,
        }
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(theirs.fileno())],
            stdin=subprocess.PIPE,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        proc = self._proc
        self.pid = proc.pid

        def send_args() -> None:  # a pipe's buffer may be smaller than the rules: off the loop, inside the bound below
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps(args).encode())
                proc.stdin.close()

        self._reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        try:
            _, first = await asyncio.wait_for(asyncio.gather(asyncio.to_thread(send_args), _read(self._reader)), START_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            self._writer.close()
            raise MirrorStartError(
                f"the mirror process did not open its folder and scrape both targets' /metrics within {START_TIMEOUT_S:g}s, and was stopped"
            ) from None
        if first is None or first[0] != "ready":
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
            self._writer.close()
            message = first[1] if first is not None else f"the mirror process ended at start (exit {proc.returncode})"
            raise MirrorStartError(message)
        self.folder = Path(first[1])
        self._up = True
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._tasks = [loop.create_task(self._read_loop()), loop.create_task(self._send_counts())]

    async def _read_loop(self) -> None:
        assert self._reader is not None
        while (msg := await _read(self._reader)) is not None:
            if msg[0] == "a":
                fut = self._answers.pop(msg[1], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg[2:])
            elif msg[0] == "closed":
                self.folder = Path(msg[1])
                if self._closed is not None and not self._closed.done():
                    self._closed.set_result(msg[2])
        if self._up and not (self._closed is not None and self._closed.done()):  # after "closed" its end is the one asked for
            self.log(f"the mirror process ({self.pid}) is gone: callers are served as before, sampled requests are counted as dropped")
        self._up = False
        for fut in self._answers.values():
            if not fut.done():
                fut.set_result(None)
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    async def _send_counts(self) -> None:
        while True:
            await asyncio.sleep(COUNTS_EVERY_S)
            self._flush_counts()

    def _flush_counts(self) -> None:
        if (self._requests or self._drops) and self._up:
            self._send(("c", self._requests, self._drops))
            self._requests, self._drops = {}, {}

    def _send(self, msg: tuple[Any, ...]) -> None:
        if not self._up or self._writer is None:
            return
        try:
            self._writer.write(_frame(msg))
        except (ConnectionError, RuntimeError):  # gone between two frames: the read loop says so
            self._up = False

    def begin_drain(self) -> None:
        self._flush_counts()
        self._send(("stopping",))

    async def drain(self, timeout: float) -> ShadowDrain | None:
        """Tell the mirror process to drain and close its folder; its drain record, or None when it is gone."""
        t0 = time.monotonic()
        self._flush_counts()
        self._send(("stop", timeout))
        record = None
        if self._closed is not None:
            try:
                record = await asyncio.wait_for(asyncio.shield(self._closed), timeout + 60)
            except TimeoutError:
                self.log(f"the mirror process did not close its folder within {timeout + 60:g}s")
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()
        if self._proc is not None:
            try:
                await asyncio.to_thread(self._proc.wait, max(1.0, timeout + 60 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                self._proc.kill()
        return ShadowDrain.model_validate(record) if record is not None else None

    # ------------------------------------------------------------ the hand-off
    def count(self, kind: str) -> None:
        self.own.requests[kind].inc()
        self._requests[kind] = self._requests.get(kind, 0) + 1

    def drop(self, reason: str) -> None:
        self.own.dropped[reason].inc()
        self._drops[reason] = self._drops.get(reason, 0) + 1

    def request(self, case_id: str, kind: str, raw: bytes, tags: dict[str, str]) -> None:
        if self._requests or self._drops:
            self._send(("c", self._requests, self._drops))
            self._requests, self._drops = {}, {}
        self._send(("r", case_id, kind, raw, tags))

    def baseline_answer(self, case_id: str, answer: BaselineAnswer) -> None:
        self._send(("b", case_id, answer.as_tuple()))

    def baseline_failed(self, case_id: str, info: ErrorInfo, started: float) -> None:
        self._send(("f", case_id, info.model_dump(), started))

    def caller_left(self, case_id: str, draining: bool) -> None:
        self._send(("l", case_id, draining))

    async def _ask(self, what: str) -> Any:
        if not self._up:
            return None
        self._flush_counts()
        self._token += 1
        token = self._token  # questions overlap (probes, scrapes): each one forgets only its own on timeout
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers[token] = fut
        self._send(("q", token, what))
        try:
            return await asyncio.wait_for(fut, 10)
        except TimeoutError:
            self._answers.pop(token, None)
            return None

    async def health(self, draining: bool) -> tuple[int, dict[str, Any]]:
        got = await self._ask("health")
        if got is None:  # gone, or alive but not answering within the ask's 10 s
            status = "mirror_stalled" if self._up else "mirror_down"
            return 503, {"status": status, "folder": str(self.folder), "mirror_pid": self.pid}
        body = {**got[0], "mirror_pid": self.pid, "handoff_bytes": self._writer.transport.get_write_buffer_size() if self._writer else 0}
        if draining:
            body["status"] = "draining"
        return (503 if draining else 200), body

    async def metrics(self) -> bytes:
        got = await self._ask("metrics")
        return bytes(got[0]) if got is not None else self.own.render()


# ---------------------------------------------------------------- the mirror process
def child_main() -> None:
    """The mirror process: open the folder, serve frames until told to stop (or the forwarding process is gone), close it."""
    from qualitycheck.core._process import die_with_parent
    from qualitycheck.traffic._rules import Rules

    die_with_parent(parent=os.getppid())  # never outlive the forwarding process
    # a terminal's Ctrl-C and an orchestrator's SIGTERM reach every process of the group: the forwarding process
    # decides when this one stops (after its own drain), and says so with a frame
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd = int(sys.argv[1])
    args = json.loads(sys.stdin.read())
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    settings = ShadowSettings.model_validate_json(args["settings"])
    if settings.shadow.sink:
        with contextlib.suppress(OSError):
            os.nice(SINK_MIRROR_NICENESS)  # why the sink's only: its docstring
    rules = Rules.model_validate_json(args["rules"])
    metrics = ShadowMetrics()
    recorder = Recorder(
        settings.shadow,
        settings.folder,
        Path(args["out"]),
        rules,
        replica=args["replica"],
        listen=args["listen"],
        metrics=metrics,
        log=log,
        noise_floor=settings.noise_floor,
    )
    run_loop(_serve_frames(socket.socket(fileno=fd), settings, recorder, metrics))


async def _serve_frames(sock: socket.socket, settings: ShadowSettings, recorder: Recorder, metrics: ShadowMetrics) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    try:
        recorder.open()
    except QualitycheckError as exc:
        writer.write(_frame(("error", str(exc))))
        await writer.drain()
        writer.close()
        return
    side = MirrorSide(settings, recorder, metrics, log=log, ask_baseline=settings.shadow.sink)
    await side.start()
    writer.write(_frame(("ready", str(recorder.folder))))
    tune_gc()
    timeout = settings.shadow.drain_timeout_s
    while True:
        msg = await _read(reader)
        if msg is None:  # the forwarding process is gone: nothing more can arrive, so nothing in flight can complete
            timeout = 0.0
            break
        op = msg[0]
        if op == "r":
            side.request(msg[1], msg[2], msg[3], msg[4])
        elif op == "b":
            side.baseline_answer(msg[1], BaselineAnswer.from_tuple(msg[2]))
        elif op == "c":
            side.count(msg[1], msg[2])
        elif op == "f":
            side.baseline_failed(msg[1], ErrorInfo.model_validate(msg[2]), msg[3])
        elif op == "l":
            side.caller_left(msg[1], msg[2])
        elif op == "q":
            body: Any = metrics.render() if msg[2] == "metrics" else side.health()
            writer.write(_frame(("a", msg[1], body)))
        elif op == "stopping":
            side.begin_drain()
        elif op == "stop":
            timeout = float(msg[1])
            break
    drain = await side.drain(timeout)
    await asyncio.to_thread(recorder.close, side.period, drain)
    try:
        writer.write(_frame(("closed", str(recorder.folder), drain.model_dump(mode="json"))))
        await writer.drain()
        writer.close()
    except (ConnectionError, RuntimeError):
        pass
