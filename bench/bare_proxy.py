"""The reference for the shadow proxy: the plainest streaming pass-through aiohttp can do.

Reads the request, sends it upstream on one pooled session, streams the
answer back read by read. No mirror, no headers filtering, no recording.
What it adds over a direct request is what one more process hop costs on
this machine, whoever writes the proxy; the shadow proxy's figures are read
against it.

With `-` for the upstream it is the sink's reference instead: every request
is read and answered at once with an empty 204, which is all a gateway's
mirror waits for; the shadow sink's answer figures are read against it.

Run: `python bench/bare_proxy.py UPSTREAM_ROOT|-`; prints `PORT <n>` once it listens.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from aiohttp import web


async def main(upstream: str) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with session.request(request.method, upstream + request.raw_path, data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")})
            await resp.prepare(request)
            async for data in up.content.iter_any():
                await resp.write(data)
            await resp.write_eof()
            return resp

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer if upstream == "-" else handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, backlog=4096).start()
    print(f"PORT {runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    run = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        pass
    run(main(sys.argv[1]))
