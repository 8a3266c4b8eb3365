"""`qualitycheck canary`: watch a live candidate against the config's guardrails and fall back automatically.

Exit codes (DESIGN.md): with `--once`, 0 healthy (no route tripped and every
watched guardrail evaluated), 1 a route is tripped, 3 not enough evidence;
2 bad input (config problems as `file:line: field: message`). The watch
itself runs until interrupted and then exits like `--once` would on its last
window.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from qualitycheck.cli._options import CANARY_OPTIONS, config_overrides
from qualitycheck.core._errors import ConfigError, Problem

if TYPE_CHECKING:
    from qualitycheck.canary._record import CanaryRecord
    from qualitycheck.canary._watch import Watcher

__all__ = ["cmd_canary"]

DEFAULT_OUT = Path("reports/canary")


def cmd_canary(a: argparse.Namespace) -> int:
    import asyncio  # here, not at the top: every command imports this module, and asyncio costs the others

    from qualitycheck.canary._actions import ActionRunner
    from qualitycheck.canary._watch import EXIT_NOT_EVALUATED, Watcher, exit_code, rearm, window_line
    from qualitycheck.core._config_file import load_config

    out = Path(a.out) if a.out else DEFAULT_OUT
    if a.rearm:
        before = rearm(out, a.rearm, dry_run=a.dry_run)
        was = f"was tripped by {before.tripped_by}" if before.state == "tripped" else "was not tripped"
        print(f"qualitycheck canary: route {a.rearm} re-armed ({was}); recorded in {out / 'canary.jsonl'}")
        return 0
    if a.on_fail and a.webhook:
        raise ConfigError([Problem("command line", None, "--on-fail", "give --on-fail or --webhook, not both")])
    if a.webhook and not a.webhook.startswith(("http://", "https://")):
        raise ConfigError([Problem("command line", None, "--webhook", "must start with http:// or https://")])
    cfg = load_config(a.config, config_overrides(vars(a), CANARY_OPTIONS))
    c = cfg.canary
    run_dir = Path(a.run) if a.run else None
    if run_dir is not None and not run_dir.is_dir():
        raise ConfigError([Problem("command line", None, "--run", f"{run_dir} is not a folder")])
    if not (c.candidate_metrics or c.prometheus or c.shadow_metrics or run_dir):
        raise ConfigError(
            [
                Problem(
                    cfg.source or "command line",
                    None,
                    "canary.candidate_metrics",
                    "nothing to watch: give --candidate-metrics URL, --prometheus URL, --shadow-metrics URL or --run DIR",
                )
            ]
        )
    if c.window_s < c.interval_s:
        raise ConfigError(
            [
                Problem(
                    cfg.source or "command line",
                    None,
                    "canary.window",
                    f"the window ({c.window}) is shorter than the interval ({c.interval})",
                )
            ]
        )
    action = ActionRunner(command=a.on_fail, webhook=a.webhook, retries=c.action_retries)
    watcher = Watcher(cfg, out, action=action, run_dir=run_dir, dry_run=a.dry_run)
    if a.once:
        record = asyncio.run(watcher.once())
        print(window_line(record))
        return exit_code(record)
    last = asyncio.run(_watch(watcher, c.listen))
    return exit_code(last) if last is not None else EXIT_NOT_EVALUATED


async def _watch(watcher: Watcher, listen: str) -> CanaryRecord | None:
    import asyncio

    from qualitycheck.canary._serve import CanaryMetrics, serve

    metrics = CanaryMetrics()
    watcher.metrics = metrics
    runner, url = await serve(metrics, watcher.status, listen, watcher.log)
    print(
        f"qualitycheck canary: watching every {watcher.c.interval} over {watcher.c.window}, trip after {watcher.c.trip_after}; "
        f"routes {', '.join(watcher.routes)}; state on {url}/qc/metrics, decision on {url}/qc/status "
        f"(Flagger's webhooks on {url}/qc/flagger/<type>); records in {watcher.out / 'canary.jsonl'}",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        last = await watcher.watch(stop=stop)
    finally:
        await runner.cleanup()
    return last
