"""The fallback action: a command (`--on-fail CMD`) or a webhook (`--webhook URL`), given the trip event.

The command runs through the shell with `QC_ROUTE`, `QC_ACTION`,
`QC_GUARDRAIL`, `QC_OBSERVED` and `QC_THRESHOLD` in its environment and the
event as JSON on stdin; exit status 0 is success. The webhook receives the
same JSON as a POST through the one HTTP layer (its retries: 5xx, 429 and
connection failures are tried again with backoff; a 4xx is not). Either
way a failure comes back as a message, never an exception: the watcher
keeps the action pending and tries again at the next window.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

from qualitycheck.core._config import HttpPolicy, Target
from qualitycheck.core._http import TRANSPORT_ERRORS, HttpClient, status_failure, transport_error

__all__ = ["ActionRunner", "event_env"]

_COMMAND_TIMEOUT_S = 300.0
_WEBHOOK_TIMEOUT_S = 30.0


def event_env(event: dict[str, Any]) -> dict[str, str]:
    """The QC_* variables a command sees."""

    def text(v: Any) -> str:
        return "" if v is None else json.dumps(v) if isinstance(v, (list, dict)) else str(v)

    return {
        "QC_ROUTE": text(event.get("route")),
        "QC_ACTION": text(event.get("action")),
        "QC_GUARDRAIL": text(event.get("guardrail")),
        "QC_OBSERVED": text(event.get("observed")),
        "QC_THRESHOLD": text(event.get("threshold")),
    }


@dataclass(frozen=True)
class ActionRunner:
    """What to do on a trip; neither set means the decision is only recorded (with a warning)."""

    command: str | None = None
    webhook: str | None = None
    retries: int = 3
    backoff_s: float = 0.5

    @property
    def configured(self) -> bool:
        return bool(self.command or self.webhook)

    async def run(self, event: dict[str, Any]) -> tuple[int, str | None]:
        """(attempts, error); error None when it succeeded."""
        if self.command:
            return await self._command(event)
        if self.webhook:
            return await self._post(event)
        return 0, "no --on-fail command or --webhook configured"

    async def _command(self, event: dict[str, Any]) -> tuple[int, str | None]:
        assert self.command is not None
        error: str | None = None
        attempts = 0
        for attempt in range(self.retries + 1):
            attempts = attempt + 1
            error = await self._command_once(event)
            if error is None:
                return attempts, None
            if attempt < self.retries:
                await asyncio.sleep(self.backoff_s * 2**attempt)
        return attempts, error

    async def _command_once(self, event: dict[str, Any]) -> str | None:
        assert self.command is not None
        try:
            proc = await asyncio.create_subprocess_shell(
                self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **event_env(event)},
            )
        except OSError as exc:
            return f"cannot start {self.command!r}: {exc}"
        try:
            out, err = await asyncio.wait_for(proc.communicate(json.dumps(event).encode()), _COMMAND_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return f"{self.command!r} did not finish within {_COMMAND_TIMEOUT_S:g}s"
        if proc.returncode != 0:
            tail = (err or out).decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            return f"{self.command!r} exited with status {proc.returncode}: {tail[0][:300]}"
        return None

    async def _post(self, event: dict[str, Any]) -> tuple[int, str | None]:
        assert self.webhook is not None
        url = self.webhook
        http = HttpClient(
            Target(url=url, model="webhook"), HttpPolicy(timeout_s=_WEBHOOK_TIMEOUT_S, retries=self.retries, backoff_s=self.backoff_s)
        )
        data = json.dumps(event).encode()

        async def once(_: int) -> int:
            # any 2xx is an acknowledgement (receivers answer 200, 202 or 204); the layer's `request` wants 200 only
            got_headers = False
            try:
                async with http.session().post(url, data=data, headers=http.headers, proxy=http.proxy) as resp:
                    got_headers = True
                    if not 200 <= resp.status < 300:
                        raise await status_failure(resp)
                    await resp.read()
                    return resp.status
            except TRANSPORT_ERRORS as exc:
                raise transport_error(exc, got_headers=got_headers, timeout_s=http.policy.timeout_s) from None

        try:
            out = await http.retrying(once)
        finally:
            await http.aclose()
        return out.attempts, None if out.error is None else f"webhook {url}: {out.error.message}"
