"""A fast OpenAI-compatible streaming server for the client benchmarks.

Written on raw asyncio protocols (no web framework) so that the server, not
the client under test, is never the bottleneck: on its own core it streams
tens of thousands of chunks per second. Two modes:

- instant (`--ttft 0 --itl 0`): answers as fast as it can, to measure client
  CPU per request and requests/s;
- real (`--ttft 0.05 --itl 0.002 --chunks 20`): models a serving engine, 50 ms
  to the first token and 2 ms between 20 chunks.

It records, per request, when it actually wrote each chunk (on the
system-wide monotonic clock), so the benchmark can compare what a client
measured with what the server really did. `GET /stats` returns and clears
that record; `GET /v1/models` answers the preflight.

Run: `python bench/server.py --port 0 [--ttft S] [--itl S] [--chunks N]`;
it prints `PORT <n>` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

_CHUNK_TEXT = " word"


class _State:
    def __init__(self, ttft: float, itl: float, chunks: int, record: bool):
        self.ttft = ttft
        self.itl = itl
        self.chunks = chunks
        self.record = record
        self.timings: list[tuple[str, float, list[float]]] = []


def _sse_chunk(payload: bytes) -> bytes:
    """One SSE event as one HTTP/1.1 chunk (chunked transfer encoding)."""
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Conn(asyncio.Protocol):
    def __init__(self, state: _State):
        self.state = state
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._parse()

    def _parse(self) -> None:
        if self.busy:
            return
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        lines = head.split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        end = head_end + 4 + length
        if len(self.buf) < end:
            return
        body = self.buf[head_end + 4 : end]
        self.buf = self.buf[end:]
        self.busy = True
        t_recv = time.perf_counter()
        asyncio.get_running_loop().create_task(self._serve(method, path, body, t_recv))

    async def _serve(self, method: str, path: str, body: bytes, t_recv: float) -> None:
        tr = self.transport
        assert tr is not None
        try:
            if path == "/stats":
                data = json.dumps(self.state.timings).encode()
                self.state.timings = []
                tr.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
            elif path.endswith("/models"):
                data = b'{"object":"list","data":[{"id":"bench","object":"model","max_model_len":4096}]}'
                tr.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
            elif path.endswith(("/chat/completions", "/completions")):
                await self._generate(tr, path.endswith("/chat/completions"), body, t_recv)
            else:
                tr.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        finally:
            self.busy = False
            if self.buf and not tr.is_closing():
                self._parse()

    async def _generate(self, tr: asyncio.Transport, chat: bool, body: bytes, t_recv: float) -> None:
        st = self.state
        req = json.loads(body)
        stream = bool(req.get("stream"))
        rid = _request_id(req)
        n = st.chunks
        usage = b'{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}' % (n, n + 8)
        sent: list[float] = []
        if st.ttft:
            await asyncio.sleep(st.ttft)
        if not stream:
            text = _CHUNK_TEXT * n
            if chat:
                choice = b'{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}' % text.encode()
            else:
                choice = b'{"index":0,"text":"%s","finish_reason":"stop"}' % text.encode()
            data = b'{"id":"b","object":"x","model":"bench","choices":[%s],"usage":%s}' % (choice, usage)
            tr.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
            sent.append(time.perf_counter())
        else:
            tr.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
            ids = b',"token_ids":[%d]' if req.get("return_token_ids") else None
            for i in range(n):
                if i and st.itl:
                    await asyncio.sleep(st.itl)
                fin = b'"stop"' if i == n - 1 else b"null"
                extra = ids % (1000 + i) if ids else b""
                if chat:
                    c = (
                        b'{"id":"b","object":"chat.completion.chunk","model":"bench","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s%s}]}'
                        % (_CHUNK_TEXT.encode(), fin, extra)
                    )
                else:
                    c = (
                        b'{"id":"b","object":"text_completion","model":"bench","choices":[{"index":0,"text":"%s","finish_reason":%s%s}]}'
                        % (_CHUNK_TEXT.encode(), fin, extra)
                    )
                tr.write(_sse_chunk(c))
                sent.append(time.perf_counter())
            if (req.get("stream_options") or {}).get("include_usage"):
                tr.write(_sse_chunk(b'{"id":"b","object":"chat.completion.chunk","model":"bench","choices":[],"usage":%s}' % usage))
            tr.write(_sse_chunk(b"[DONE]") + b"0\r\n\r\n")
        if st.record:
            st.timings.append((rid, t_recv, sent))


def _request_id(req: dict) -> str:
    """The benchmark puts a unique id as the last word of the prompt."""
    if "messages" in req:
        text = str(req["messages"][-1].get("content", ""))
    else:
        text = str(req.get("prompt", ""))
    return text.rsplit(" ", 1)[-1]


async def serve(port: int, state: _State) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Conn(state), "127.0.0.1", port, backlog=4096)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.0, help="seconds before the first chunk")
    ap.add_argument("--itl", type=float, default=0.0, help="seconds between chunks")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--record", action="store_true", help="keep per-request send times for GET /stats")
    ap.add_argument("--no-uvloop", action="store_true")
    a = ap.parse_args()
    state = _State(a.ttft, a.itl, a.chunks, a.record)
    run = asyncio.run
    if not a.no_uvloop:
        try:
            import uvloop

            run = uvloop.run
        except ImportError:
            pass
    try:
        run(serve(a.port, state))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
