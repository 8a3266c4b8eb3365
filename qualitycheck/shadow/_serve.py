"""`qualitycheck shadow`: serve until SIGTERM, drain, then write the last folder's summary.

The order on a stop is what keeps acknowledged pairs: stop listening and let
in-flight requests finish, then let the mirror process finish its pairs (both
within `shadow.drain_timeout_s`), store every finished pair, record the last /metrics window, close the folder
(`shadow.json`), and only then score and summarise it as `qualitycheck run`
does (summary.json, report.html, signoff.md): the proxy serves nobody by
then, so that work never touches a caller's latency.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from qualitycheck.core._config_file import Config
from qualitycheck.core._records import ShadowDrain
from qualitycheck.core._store import RunStore
from qualitycheck.shadow._handoff import MirrorStartError, ProcessHandoff
from qualitycheck.shadow._loop import SWITCH_INTERVAL_S, log, run_loop, tune_gc
from qualitycheck.shadow._proxy import ShadowProxy
from qualitycheck.shadow._settings import ShadowSettings
from qualitycheck.shadow._sink import ShadowSink
from qualitycheck.traffic._rules import Rules

__all__ = ["EXIT_INCOMPLETE", "run_shadow"]

EXIT_INCOMPLETE = 3
"""The mirror process was gone at the stop: its last folder was not closed, so no verdict is given."""


def run_shadow(
    cfg: Config,
    out: Path,
    rules: Rules,
    *,
    host: str,
    port: int,
    summarize: bool = True,
    on_listening: Callable[[str], None] | None = None,
) -> int:
    """Serve until SIGTERM or SIGINT; returns the last folder's verdict exit code (0 when not summarised).

    The mirror side runs in a process of its own (`shadow._handoff`): it opens
    the folder (a folder holding another run is refused, exit 2, before
    anyone is served), and this process only forwards (or, as a sink,
    answers) and hands sampled requests over. Both take the `ShadowSettings`
    made from `cfg`; the whole config serves only the last folder's summary.
    """
    # The loop thread shares the GIL with aiohttp's resolver and the to_thread calls; a shorter switch interval
    # bounds how long a thread holds it while the loop has bytes to forward.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    settings = ShadowSettings.of_config(cfg)
    replica = secrets.token_hex(4)
    handoff = ProcessHandoff(settings, out, rules.model_dump_json(), replica=replica, listen=f"{host}:{port}", log=log)

    async def main() -> ShadowDrain | None:
        kind = ShadowSink if settings.shadow.sink else ShadowProxy
        proxy = kind(settings, handoff, host=host, port=port, replica=replica, log=log)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            url = await proxy.start()
        except MirrorStartError:
            raise
        except BaseException:
            await handoff.drain(0.0)
            raise
        s = settings.shadow
        log(
            f"{'sink ' if s.sink else ''}listening on {url}: baseline {settings.baseline.public_url}, "
            f"candidate {settings.candidate.public_url}, "
            f"sample {s.sample:g}, max in flight {s.max_inflight}"
            + (f", rotating every {s.rotate_every}" if s.rotate_every else "")
            + f" → {handoff.folder} (mirror process {handoff.pid})"
        )
        tune_gc()
        if on_listening is not None:
            on_listening(url)
        await stop.wait()
        log(f"stopping: draining for up to {s.drain_timeout_s:g}s")
        drain = await proxy.drain()
        if drain is None:
            log("drained: the mirror process was gone; its folder is as a kill -9 leaves one (`qualitycheck score DIR` summarises it)")
        else:
            log(
                f"drained in {drain.seconds:.1f}s: {drain.finished} of {drain.in_flight} pairs in flight finished, "
                f"{drain.cancelled} cancelled"
            )
        return drain

    drain = run_loop(main())
    if not summarize or drain is None or handoff.folder is None:
        return 0 if drain is not None else EXIT_INCOMPLETE
    from qualitycheck.pipeline._run import finish

    with RunStore.open(handoff.folder) as store:
        return finish(store, cfg)
