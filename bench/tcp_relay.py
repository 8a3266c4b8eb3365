"""The floor under any Python proxy: a byte relay that handles no HTTP at all.

Each client connection gets its own upstream connection, and bytes are copied
both ways as they arrive, on uvloop's protocol callbacks: no parsing, no
re-encoding, no task woken per chunk. What it adds over a direct request is
what one more process hop costs on this machine when nothing is done with the
bytes; the bare aiohttp pass-through (bench/bare_proxy.py) adds the cost of
handling HTTP in Python on top, and the shadow proxy is read against both.

Run: `python bench/tcp_relay.py UPSTREAM_ROOT`; prints `PORT <n>` once it listens.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any
from urllib.parse import urlsplit


class _Side(asyncio.Protocol):
    """One connection of a relayed pair: what it receives is written to its peer; a full peer pauses its reading."""

    def __init__(self) -> None:
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.peer: _Side | None = None
        self.pending: list[bytes] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.pending.append(data)

    def eof_received(self) -> bool:
        """A half-close is passed on: the peer's side stays open for what the other end still sends."""
        if self.peer is not None and self.peer.transport is not None and self.peer.transport.can_write_eof():
            self.peer.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Client(_Side):
    def __init__(self, host: str, port: int, tasks: set[asyncio.Task[None]]):
        super().__init__()
        self.host, self.port, self.tasks = host, port, tasks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        task = asyncio.get_running_loop().create_task(self._connect())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self) -> None:
        up = _Side()
        try:
            await asyncio.get_running_loop().create_connection(lambda: up, self.host, self.port)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        if self.closed:  # the client left while the upstream connection was being made
            up.transport.close()
            return
        up.peer, self.peer = self, up
        for data in self.pending:
            up.transport.write(data)
        self.pending = []


async def main(upstream: str) -> None:
    u = urlsplit(upstream)
    if u.scheme != "http":
        raise SystemExit(f"tcp_relay: an http:// upstream only (got {upstream!r})")
    host, port = u.hostname or "127.0.0.1", u.port or 80
    tasks: set[asyncio.Task[None]] = set()
    server = await asyncio.get_running_loop().create_server(lambda: _Client(host, port, tasks), "127.0.0.1", 0, backlog=4096)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    run = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        pass
    run(main(sys.argv[1]))
