"""The shadow proxy's run folders: each mirrored pair stored as a case with its answers, as it completes.

A folder is a run folder like any other (`core._store.RunStore`: manifest,
stored config, cases, responses, /metrics windows), so `qualitycheck
score/report/gate DIR` and `merge` read it as they read a `run`. Its cases
arrive with the traffic: each pair is turned into a case by replay's own
function (`traffic.case_from_request`: category from the rules file, checks
from the request, PII redacted) and committed with its answers in one
transaction (`RunStore.put_case`), so a `kill -9` loses at most the pairs in
flight.

All of that runs on a writer thread of its own, as the runner's writer does:
SQLite's commits wait on the disk, and a wait on the event loop would delay
the bytes of every stream the proxy is forwarding. The thread receives pairs,
windows and rotations through one queue, in order; a rotation closes the
folder (its period record, the noise-floor record, `shadow.json`) and opens
the next.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from qualitycheck.core._cases import Case
from qualitycheck.core._checks import Checks
from qualitycheck.core._config import ShadowOptions
from qualitycheck.core._records import ErrorInfo, MetricsWindow, MetricsWindows, NoiseFloorRecord, Response, ShadowPeriods, ToolCall
from qualitycheck.core._store import RunStore
from qualitycheck.shadow._settings import FolderTemplate
from qualitycheck.shadow._tally import ShadowDrain, ShadowMetrics, ShadowPeriod
from qualitycheck.traffic._redact import Conversation, Redactor
from qualitycheck.traffic._rules import Rules, case_from_request

__all__ = ["SUMMARY_FILE", "PairRecord", "Recorder", "folder_name"]

SUMMARY_FILE = "shadow.json"
"""The folder's period record, as a file for people (the store holds the same under the `shadow` artifact)."""


@dataclass(slots=True)
class PairRecord:
    """One mirrored request with its answers, handed from the event loop to the writer."""

    case_id: str
    raw: bytes
    """The request body as the caller sent it (the redactor's hint of which scans it needs)."""
    body: dict[str, Any]
    tags: dict[str, str]
    responses: list[Response]
    """baseline, candidate, and `control` when the baseline was asked again."""
    release: Callable[[], None]
    """Frees the pair's slot under `max_inflight` once it is stored (or given up)."""


@dataclass(slots=True)
class _Prepared:
    pair: PairRecord
    case: Case
    responses: list[Response]
    """Redacted (unless keep_pii); the pair keeps the answers as given, for the tallies."""
    redactions: dict[str, int]


_BATCH = 256
"""Pairs at most in one commit: what arrived while the previous commit ran (one pair when the writer keeps up)."""
_CHECKS_KEPT = 1024
"""Distinct `checks` validated and kept at most (then forgotten all at once): traffic repeats a few shapes."""


@dataclass(slots=True)
class _Written:
    """The writer's own tally for the open folder: what it stored, and what it could not."""

    stored: int = 0
    not_a_case: int = 0
    store_failed: int = 0
    baseline_errors: dict[str, int] = field(default_factory=dict)
    candidate_errors: dict[str, int] = field(default_factory=dict)
    compared: int = 0
    identical: int = 0
    asked_again: int = 0
    redactions: dict[str, int] = field(default_factory=dict)


def folder_name(replica: str, seq: int, now: float | None = None) -> str:
    """A rotated folder's name: UTC start time first, so a listing is in time order."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + f"-{replica}-{seq:04d}"


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        counts[k] = counts.get(k, 0) + v


def _redacted(r: Response, conv: Conversation) -> Response:
    """An answer with its text, tool-call arguments and error message redacted in the pair's conversation
    (the answer itself when nothing in it is replaced: most answers hold no PII, and a copy costs more than the scan)."""
    update: dict[str, Any] = {}
    if r.text:
        text = conv.text(r.text)
        if text != r.text:
            update["text"] = text
    if r.tool_calls:
        calls = [ToolCall(name=c.name, arguments=conv.text(c.arguments), id=c.id) for c in r.tool_calls]
        if calls != r.tool_calls:
            update["tool_calls"] = calls
    if r.error is not None:
        message = conv.text(r.error.message)
        if message != r.error.message:
            update["error"] = ErrorInfo(kind=r.error.kind, message=message, status=r.error.status)
    return r.model_copy(update=update) if update else r


class Recorder:
    """The run folders of one proxy process and the thread that writes them.

    Without rotation the folder is `out` itself (a restarted proxy appends to
    it: the manifest matches and case ids are unique per process); with
    `rotate_every` each period gets `out/<UTC start>-<replica>-<seq>`.
    `open` runs before the proxy listens, so a folder holding another run is
    refused (exit 2) before any client is served. Each folder starts from
    `folder` (its manifest and stored config, made from the config above).
    """

    _STOP = object()

    def __init__(
        self,
        shadow: ShadowOptions,
        folder: FolderTemplate,
        out: Path,
        rules: Rules,
        *,
        replica: str,
        listen: str,
        metrics: ShadowMetrics,
        log: Callable[[str], None],
        noise_floor: bool,
    ):
        self.shadow = shadow
        self.template = folder
        self.out = Path(out)
        self.rules = rules
        self.replica = replica
        self.listen = listen
        self.metrics = metrics
        self.log = log
        self.noise_floor = noise_floor
        self._rotating = shadow.rotate_every is not None
        self._redactor = None if shadow.keep_pii else Redactor()
        self._checks: dict[str, Checks] = {}
        """Validated `checks` by their JSON (order kept: a spec is stored as it was written)."""
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._store: RunStore | None = None
        self._period: ShadowPeriod | None = None
        self._written = _Written()
        self._windows: list[MetricsWindow] = []
        self._next_idx = 0
        self._floor_base = NoiseFloorRecord(cases=0, requests=0, of_cases=0)
        self._seq = 0
        self.folders: list[Path] = []
        self._children: list[subprocess.Popen[bytes]] = []
        self.failure: BaseException | None = None

    # ------------------------------------------------------------ called from the event loop
    @property
    def folder(self) -> Path:
        return self.folders[-1]

    def open(self) -> Path:
        """Open the first folder and start the writer thread."""
        self._open_folder()
        self._thread = threading.Thread(target=self._run, name="qc-shadow-writer", daemon=True)
        self._thread.start()
        return self.folder

    def put_pairs(self, pairs: list[PairRecord]) -> None:
        self._queue.put(pairs)

    def put_window(self, w: MetricsWindow) -> None:
        self._queue.put(("window", w))

    def rotate(self, period: ShadowPeriod) -> None:
        """Close the folder with the loop's tally of its period, and open the next (in the writer, after what is queued)."""
        self._queue.put(("rotate", period))

    def close(self, period: ShadowPeriod, drain: ShadowDrain | None) -> None:
        """Store what is queued, close the last folder and stop the thread (blocks: call it off the loop)."""
        self._queue.put(("close", period, drain))
        self._queue.put(self._STOP)
        if self._thread is not None:
            self._thread.join()

    def backlog(self) -> int:
        return self._queue.qsize()

    def new_period(self) -> ShadowPeriod:
        s = self.shadow
        return ShadowPeriod(
            mode="sink" if s.sink else "proxy",
            replica=self.replica,
            listen=self.listen,
            sample=s.sample,
            max_inflight=s.max_inflight,
            started_at=time.time(),
        )

    # ------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        pending: Any = None
        while True:
            item = pending if pending is not None else self._queue.get()
            pending = None
            if isinstance(item, list):  # with them, whatever else is queued: one commit for all of them
                batch = list(item)
                while len(batch) < _BATCH:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if not isinstance(nxt, list):
                        pending = nxt
                        break
                    batch.extend(nxt)
                self._guarded(self._store_pairs, batch)
            elif item is self._STOP:
                return
            else:
                self._guarded(self._control, item)

    def _guarded(self, step: Callable[[Any], None], arg: Any) -> None:
        try:
            step(arg)
        except Exception as exc:  # a disk or store failure: keep serving, say so once
            if self.failure is None:
                self.log(f"the run store failed ({type(exc).__name__}: {str(exc)[:200]}); pairs are dropped until it recovers")
            self.failure = exc

    def _control(self, item: tuple[Any, ...]) -> None:
        if item[0] == "window":
            assert self._store is not None
            self._windows.append(item[1])
            self._store.put_record(MetricsWindows(windows=self._windows))
            self._checkpoint()
        elif item[0] == "rotate":
            self._close_folder(item[1], "rotation", None)
            self._open_folder()
        elif item[0] == "close":
            self._close_folder(item[1], "stopped", item[2])

    def _prepare(self, p: PairRecord) -> _Prepared | None:
        """The pair as a case (replay's rules and checks, redacted) with its redacted answers; None when it cannot be a case."""
        drafted = case_from_request(p.body, p.tags, self.rules, self._redactor, case_id=p.case_id, raw=p.raw)
        if not isinstance(drafted, str):
            case = self._case(drafted.case)
            if case is not None:
                responses = p.responses
                redactions = dict(drafted.redactions or {})
                if self._redactor is not None:  # one conversation for the answers: the same value reads the same in each
                    conv = self._redactor.conversation()
                    responses = [_redacted(r, conv) for r in responses]
                    _add(redactions, conv.counts)
                return _Prepared(p, case, responses, redactions)
        self._written.not_a_case += 1
        self.metrics.dropped["not_a_case"].inc()
        return None

    def _case(self, fields: dict[str, Any]) -> Case | None:
        """The drafted case validated, or None when it is not a valid case.

        Its `checks` are the tool's own, drafted by replay's rules from the
        request's shape, so the same few come back request after request:
        each distinct one is validated once (a JSON schema's check is the
        costly part) and the validated value reused, which is what
        `Case.model_validate` would have built from it.
        """
        raw = fields.get("checks")
        if raw is not None:
            key = json.dumps(raw)
            checks = self._checks.get(key)
            if checks is None:
                try:
                    checks = Checks.model_validate(raw)
                except (ValueError, AssertionError):  # what pydantic turns into the case's ValidationError
                    return None
                if len(self._checks) >= _CHECKS_KEPT:
                    self._checks.clear()
                self._checks[key] = checks
            fields = {**fields, "checks": checks}
        try:
            return Case.model_validate(fields)
        except ValidationError:
            return None

    def _store_pairs(self, batch: list[PairRecord]) -> None:
        try:
            ready = [x for x in map(self._prepare, batch) if x is not None]
            assert self._store is not None
            store = self._store
            try:
                store.put_cases((x.case, self._next_idx + i, x.responses) for i, x in enumerate(ready))
                stored = ready
            except Exception:  # one bad pair must not cost the others: store them one at a time
                stored = []
                for x in ready:
                    try:
                        store.put_case(x.case, self._next_idx + len(stored), x.responses)
                        stored.append(x)
                    except Exception:
                        self._written.store_failed += 1
                        self.metrics.dropped["store_failed"].inc()
                        if len(stored) + self._written.store_failed == len(ready):
                            raise
            self._next_idx += len(stored)
            for x in stored:
                self._count(x)
        finally:
            for p in batch:
                p.release()

    def _count(self, x: _Prepared) -> None:
        w = self._written
        w.stored += 1
        self.metrics.stored.inc()
        _add(w.redactions, x.redactions)
        by_target = {r.target: r for r in x.pair.responses}
        b, c = by_target.get("baseline"), by_target.get("candidate")
        for errs, r in ((w.baseline_errors, b), (w.candidate_errors, c)):
            if r is not None and r.error is not None:
                errs[r.error.kind] = errs.get(r.error.kind, 0) + 1
        if b is not None and c is not None and b.ok and c.ok:
            w.compared += 1
            w.identical += b.answer == c.answer
        if "control" in by_target:
            w.asked_again += 1

    def _manifest(self) -> dict[str, Any]:
        manifest = dict(self.template.manifest)
        manifest["suite_fingerprint"] = "shadow"  # never the fingerprint of a suite: `run --out` refuses the folder
        manifest["shadow"] = {"listen": self.listen, "sample": self.shadow.sample}
        return manifest

    def _open_folder(self) -> None:
        self._seq += 1
        folder = self.out / folder_name(self.replica, self._seq) if self._rotating else self.out
        store = RunStore.create(folder, self._manifest(), [])
        store.put_artifact("config", self.template.config)
        self._store = store
        self._next_idx = store.case_count()
        self._floor_base = NoiseFloorRecord(cases=0, requests=0, of_cases=0)
        if self.noise_floor:  # a restarted proxy appending to the folder counts on from what the one before it recorded
            self._floor_base = store.record(NoiseFloorRecord) or self._floor_base
        # the folder's windows are kept here, so that a week of scrapes is not read back and revalidated at each one
        self._windows = list(store.record_or_empty(MetricsWindows).windows)
        self._period = self.new_period()
        self._written = _Written()
        self.folders.append(folder)

    def _checkpoint(self) -> None:
        """Keep the folder's manifest count and noise-floor record current, for a folder a `kill -9` leaves behind."""
        store = self._store
        assert store is not None
        manifest = store.manifest
        manifest["cases"] = store.case_count()
        store.set_meta("manifest", manifest)
        if self.noise_floor:  # what `generation._noise` records for a run, so the summary reads the floor the same way
            now = NoiseFloorRecord(cases=self._written.asked_again, requests=self._written.asked_again, of_cases=self._written.compared)
            store.put_record(NoiseFloorRecord.merged([self._floor_base, now]))

    def _close_folder(self, loop_period: ShadowPeriod, because: str, drain: ShadowDrain | None) -> None:
        store, w = self._store, self._written
        assert store is not None
        self._checkpoint()
        dropped = dict(loop_period.dropped)
        for reason, n in (("not_a_case", w.not_a_case), ("store_failed", w.store_failed)):
            if n:
                dropped[reason] = dropped.get(reason, 0) + n
        assert self._period is not None
        period = loop_period.model_copy(
            update={
                "started_at": self._period.started_at,
                "closed_at": time.time(),
                "closed_because": because,
                "dropped": dropped,
                "stored": w.stored,
                "baseline_errors": w.baseline_errors,
                "candidate_errors": w.candidate_errors,
                "compared": w.compared,
                "identical": w.identical,
                "asked_again": w.asked_again,
                "redactions": w.redactions,
                "drain": drain,
            }
        )
        before = store.record_or_empty(ShadowPeriods)
        periods = ShadowPeriods(periods=[*before.periods, period])
        store.put_record(periods)
        folder = store.folder
        store.close()
        self._store = None
        listed = [p.model_dump(mode="json") for p in periods.periods]
        (folder / SUMMARY_FILE).write_text(json.dumps(listed if len(listed) > 1 else listed[0], indent=2) + "\n", encoding="utf-8")
        self.log(
            f"{folder}: closed ({because}): {w.stored} pairs stored, {w.identical}/{w.compared} identical, "
            f"candidate errors {sum(w.candidate_errors.values())}, dropped {sum(dropped.values())}"
        )
        if because == "rotation" and self.shadow.summarize_rotated:
            self._summarize(folder)

    def _summarize(self, folder: Path) -> None:
        """Score the closed folder and write its summary in a child process at low priority, off the proxy's core time."""
        self._children = [c for c in self._children if c.poll() is None]
        with (folder / "summary.log").open("wb") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "qualitycheck", "score", str(folder)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "NO_COLOR": "1"},
            )
        try:
            os.setpriority(os.PRIO_PROCESS, child.pid, 10)
        except OSError:  # gone already, or not permitted: it only runs at normal priority
            pass
        self._children.append(child)
