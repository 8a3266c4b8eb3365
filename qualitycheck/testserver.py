"""An in-process OpenAI-compatible server with scripted answers and faults.

For tests (ours and users' own gate tests) and benchmarks: it speaks enough
of vLLM's dialect — chat and completions, SSE streaming with usage and
`token_ids`, tool calls (streamed as OpenAI sends them: the name first,
then the argument text in pieces), /v1/models, /tokenize, /metrics with
`vllm:spec_decode_*` counters, /health, and a toy model's
`prompt_logprobs` for a completions request whose prompt is token ids
(`token_logprobs`), refusing what vLLM refuses (a prompt that leaves no
room for the token it must generate, more logprobs than `max_logprobs`),
or answering as a llama-server or a hosted API would (`engine`) — and replays recorded streams
byte for byte (`recorded`), and injects the faults vLLM cannot be made to produce
on demand: 5xx, 429 with Retry-After, a reset mid-stream, a malformed chunk,
latency. It runs on a loopback port in a background thread, so the client
under test goes through a real socket.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["Fault", "TestServer", "ToolReply", "token_id", "tokenize_text"]


@dataclass(frozen=True)
class ToolReply:
    """An answer made of tool calls: `calls` are (name, argument text) pairs, sent as given after `content`."""

    calls: tuple[tuple[str, str], ...]
    content: str = ""


Answer = str | ToolReply | Callable[[dict[str, Any]], "str | ToolReply"]


def tokenize_text(text: str) -> list[str]:
    """A toy tokenizer: words with their leading space, so pieces join back to the text."""
    out: list[str] = []
    cur = ""
    for ch in text:
        if ch in " \n" and cur.strip():
            out.append(cur)
            cur = ch
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def _tok_id(piece: str) -> int:
    return int(sum(ord(c) * 31**i for i, c in enumerate(piece[:6])) % 49152)


def token_id(piece: str) -> int:
    """The test server's id of one piece of `tokenize_text` (what /tokenize and `token_ids` carry)."""
    return _tok_id(piece)


@dataclass
class Fault:
    """A fault for requests whose prompt contains `match` ('' matches all).

    kind: 'status' (HTTP `status` for the first `times` tries; times=None: always),
    'reset' (close the connection after `after_chunks` chunks), 'malformed'
    (send a broken chunk after `after_chunks`), 'hang' (never answer),
    'no_done' (end the stream without [DONE]).
    """

    kind: str
    match: str = ""
    status: int = 503
    times: int | None = 1
    retry_after: str | None = None
    after_chunks: int = 1
    seen: dict[str, int] = field(default_factory=dict)

    def fires(self, key: str) -> bool:
        n = self.seen.get(key, 0)
        self.seen[key] = n + 1
        return self.times is None or n < self.times


@dataclass
class TestServer:
    """Start with `with TestServer(...) as srv:`; `srv.url` is the base URL."""

    __test__ = False  # not a pytest test class

    answers: dict[str, Answer] = field(default_factory=dict)
    """Prompt substring → answer (first match wins); else `default`."""
    default: Answer = "OK."
    model: str = "test-model"
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens_per_chunk: int = 1
    chat_template: str = "<|user|>{content}<|end|>"
    """Applied by /tokenize per message; change it to simulate template drift."""
    max_model_len: int = 2048
    speculative: dict[str, Any] | None = None
    """e.g. {"k": 3, "acceptance": 0.7}: /metrics then exposes spec-decode counters."""
    faults: list[Fault] = field(default_factory=list)
    version: str = "0.0-test"
    return_token_ids: bool = True
    strict_model: bool = False
    """Answer 404 with vLLM's error body to a request naming another model (off: any name is served)."""
    recorded: dict[str, bytes] = field(default_factory=dict)
    """Prompt substring → a recorded response body (an SSE stream, or JSON), sent byte for byte."""
    token_logprobs: dict[str, float] = field(default_factory=dict)
    """The toy model scoring answers (`prompt_logprobs`): piece of `tokenize_text` → its log-probability at every
    position; the most likely listed piece ranks 1. A piece not listed gets `unlisted_logprob` and a rank below them all.
    Without one (empty), the server cannot score an answer and refuses `prompt_logprobs` with a 400, so a run against it
    records the likelihood evidence as not evaluated rather than judge answers by a flat model."""
    unlisted_logprob: float = -9.0
    max_logprobs: int = 20
    """vLLM's `--max-logprobs`: a request asking for more `prompt_logprobs` is refused with vLLM's message."""
    engine: str = "vllm"
    """`vllm`; `llama`: answers /props as llama-server does (it cannot score a given answer); `hosted`: no /tokenize."""
    log: list[dict[str, Any]] = field(default_factory=list)
    received: dict[str, int] = field(default_factory=dict)
    """Requests received per path, every endpoint counted (`log` holds only generation and /tokenize bodies): what a
    test counts to show a server was asked nothing."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[str, Any] = {
            "drafts": 0.0,
            "draft_tokens": 0.0,
            "accepted": 0.0,
            "per_pos": {},
            "generation_tokens": 0.0,
            "requests": 0.0,
        }
        """Exposed on /metrics as vLLM names them; tests may set values directly to script them."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TestServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            app = web.Application(middlewares=[self._count])
            app.router.add_post("/v1/chat/completions", self._chat)
            app.router.add_post("/v1/completions", self._completions)
            app.router.add_get("/v1/models", self._models)
            if self.engine != "hosted":
                app.router.add_post("/tokenize", self._tokenize)
            if self.engine == "llama":
                app.router.add_get("/props", self._props)
            app.router.add_get("/metrics", self._metrics)
            app.router.add_get("/health", self._health)
            app.router.add_get("/version", self._version)
            self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name="qc-testserver")
        self._thread.start()
        ready.wait(10)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # ------------------------------------------------------------ helpers
    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.received[request.path] = self.received.get(request.path, 0) + 1
        response: web.StreamResponse = await handler(request)
        return response

    def requests(self, path: str = "") -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.log if e["path"].endswith(path)]

    def _prompt_of(self, body: dict[str, Any]) -> str:
        if "messages" in body:
            return "\n".join(str(m.get("content", "")) for m in body["messages"])
        p = body.get("prompt", "")
        return p if isinstance(p, str) else json.dumps(p)

    def _answer(self, body: dict[str, Any]) -> str | ToolReply:
        prompt = self._prompt_of(body)
        for key, ans in self.answers.items():
            if key in prompt:
                return ans(body) if callable(ans) else ans
        return self.default(body) if callable(self.default) else self.default

    def _fault(self, prompt: str) -> Fault | None:
        for f in self.faults:
            if f.match in prompt and f.fires(prompt):
                return f
        return None

    # ------------------------------------------------------------ endpoints
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        prompt = self._prompt_of(body)
        with self._lock:
            peer = request.transport.get_extra_info("peername") if request.transport is not None else None
            self.log.append(
                {"path": request.path, "body": body, "t": time.time(), "auth": request.headers.get("Authorization"), "peer": peer}
            )
        if self.strict_model and body.get("model") != self.model:
            return web.json_response(
                {
                    "error": {
                        "message": f"The model `{body.get('model')}` does not exist.",
                        "type": "NotFoundError",
                        "param": "model",
                        "code": 404,
                    }
                },
                status=404,
            )
        fault = self._fault(prompt)
        if (
            not chat
            and (fault is None or fault.kind != "status")
            and self._is_ids(body.get("prompt"))
            and body.get("prompt_logprobs") is not None
        ):
            return self._prompt_logprobs(body)
        if fault and fault.kind == "status":
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            return web.json_response({"error": {"message": f"injected {fault.status}"}}, status=fault.status, headers=headers)
        if fault and fault.kind == "hang":
            await asyncio.sleep(3600)
        for key, raw in self.recorded.items():
            if key in prompt:
                ctype = "text/event-stream" if raw.lstrip().startswith(b"data:") else "application/json"
                return web.Response(body=raw, headers={"Content-Type": ctype})
        reply = self._answer(body)
        calls = reply.calls if isinstance(reply, ToolReply) else ()
        text = reply.content if isinstance(reply, ToolReply) else reply
        pieces = tokenize_text(text)
        max_tokens = body.get("max_tokens")
        finish = "stop"
        if max_tokens is not None and len(pieces) > max_tokens:
            pieces, finish = pieces[:max_tokens], "length"
        call_pieces = [(i, name, [args[j : j + 4] for j in range(0, len(args), 4)] or [""]) for i, (name, args) in enumerate(calls)]
        if calls:
            finish = "tool_calls"
        self._count_speculation(len(pieces) + sum(len(a) for _, _, a in call_pieces))
        usage = {
            "prompt_tokens": len(tokenize_text(prompt)),
            "completion_tokens": len(pieces) + sum(len(a) for _, _, a in call_pieces),
            "total_tokens": len(tokenize_text(prompt)) + len(pieces) + sum(len(a) for _, _, a in call_pieces),
        }
        want_ids = self.return_token_ids and body.get("return_token_ids")
        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        if not body.get("stream"):
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["message"] = {"role": "assistant", "content": "".join(pieces) if pieces or not calls else None}
                if calls:
                    choice["message"]["tool_calls"] = [
                        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
                        for i, (name, args) in enumerate(calls)
                    ]
            else:
                choice["text"] = "".join(pieces)
            if want_ids:
                choice["token_ids"] = [_tok_id(p) for p in pieces]
            return web.json_response(
                {
                    "id": "cmpl-test",
                    "object": "chat.completion" if chat else "text_completion",
                    "model": self.model,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        groups = [pieces[i : i + self.tokens_per_chunk] for i in range(0, len(pieces), self.tokens_per_chunk)] or [[]]
        for n, group in enumerate(groups):
            if n and self.itl_s:
                await asyncio.sleep(self.itl_s)
            if fault and n == fault.after_chunks:
                if fault.kind == "reset":
                    request.transport.close()  # type: ignore[union-attr]
                    return resp
                if fault.kind == "malformed":
                    await resp.write(b'data: {"choices": [{"delta": {"content": "x"\n\n')
                    continue
                if fault.kind == "no_done":
                    await resp.write_eof()
                    return resp
            piece = "".join(group)
            choice = {"index": 0, "finish_reason": finish if n == len(groups) - 1 and not calls else None}
            if chat:
                choice["delta"] = {"content": piece} if n else {"role": "assistant", "content": piece}
            else:
                choice["text"] = piece
            if want_ids:
                choice["token_ids"] = [_tok_id(p) for p in group]
            chunk = {"id": "cmpl-test", "object": "chat.completion.chunk", "model": self.model, "choices": [choice]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        for i, name, arg_pieces in call_pieces if chat else []:
            for j, piece in enumerate(arg_pieces):
                if self.itl_s:
                    await asyncio.sleep(self.itl_s)
                fn = {"name": name, "arguments": piece} if j == 0 else {"arguments": piece}
                call = {"index": i, "function": fn} | ({"id": f"call_{i}", "type": "function"} if j == 0 else {})
                delta = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
                await resp.write(b"data: " + json.dumps({"id": "cmpl-test", "choices": [delta]}).encode() + b"\n\n")
        if calls and chat:
            end = {"id": "cmpl-test", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
            await resp.write(b"data: " + json.dumps(end).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(b"data: " + json.dumps({"id": "cmpl-test", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    @staticmethod
    def _is_ids(prompt: Any) -> bool:
        return isinstance(prompt, list) and bool(prompt) and all(isinstance(x, int) for x in prompt)

    def _pieces(self) -> dict[int, str]:
        """Token id → piece for every piece the toy model lists and every answer or prompt piece this server has made."""
        known = {_tok_id(p): p for p in self.token_logprobs}
        for ans in (self.default, *self.answers.values()):
            if isinstance(ans, str):
                known.update((_tok_id(p), p) for p in tokenize_text(ans))
        return known

    def _scores(self) -> list[tuple[int, float, str]]:
        """The listed pieces, most likely first: (id, logprob, piece)."""
        return sorted(((_tok_id(p), lp, p) for p, lp in self.token_logprobs.items()), key=lambda x: -x[1])

    def _prompt_logprobs(self, body: dict[str, Any]) -> web.Response:
        """vLLM's answer to a scoring request: `choices[0].prompt_logprobs`, one entry per prompt token, the first null."""
        if not self.token_logprobs:
            return self._bad_request("this test server has no toy model to score prompts with (token_logprobs)", "prompt_logprobs", None)
        ids: list[int] = body["prompt"]
        k = int(body["prompt_logprobs"])
        max_tokens = int(body.get("max_tokens") or 16)
        if k > self.max_logprobs:
            message = f"Requested prompt logprobs of {k}, which is greater than max allowed: {self.max_logprobs}"
            return self._bad_request(message, "prompt_logprobs", k)
        room = self.max_model_len - len(ids)
        if room < 1:
            return self._bad_request(f"max_tokens must be at least 1, got {room}.", "max_tokens", room)
        ranked = self._scores()
        rank_of = {tid: r + 1 for r, (tid, _, _) in enumerate(ranked)}
        logprob_of = {tid: lp for tid, lp, _ in ranked}
        pieces = self._pieces()
        top = {str(tid): {"logprob": lp, "rank": rank_of[tid], "decoded_token": p} for tid, lp, p in ranked[:k]}
        entries: list[Any] = [None]
        for tid in ids[1:]:
            entry = dict(top)
            own = {
                "logprob": logprob_of.get(tid, self.unlisted_logprob),
                "rank": rank_of.get(tid, len(ranked) + 1 + tid % 1000),
                "decoded_token": pieces.get(tid, f"<{tid}>"),
            }
            entry[str(tid)] = own
            entries.append(entry)
        with self._lock:
            self.counters["requests"] += 1
        choice = {"index": 0, "text": "", "finish_reason": "length", "prompt_logprobs": entries}
        usage = {"prompt_tokens": len(ids), "completion_tokens": min(max_tokens, room), "total_tokens": len(ids) + min(max_tokens, room)}
        return web.json_response(
            {"id": "cmpl-score", "object": "text_completion", "model": self.model, "choices": [choice], "usage": usage}
        )

    @staticmethod
    def _bad_request(message: str, param: str, value: Any) -> web.Response:
        """vLLM's 400 body for a request it refuses (`VLLMValidationError`)."""
        text = f"{message} (parameter={param}, value={value})"
        return web.json_response({"error": {"message": text, "type": "BadRequestError", "param": param, "code": 400}}, status=400)

    async def _props(self, request: web.Request) -> web.Response:
        """llama-server's /props (the fields preflight and the likelihood stage read)."""
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": self.max_model_len, "params": {"temperature": 0.8}},
                "chat_template": self.chat_template,
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_path": f"/models/{self.model}.gguf",
            }
        )

    def _count_speculation(self, n_tokens: int) -> None:
        with self._lock:
            self.counters["generation_tokens"] += n_tokens
            self.counters["requests"] += 1
        if not self.speculative or n_tokens == 0:
            return
        k = int(self.speculative.get("k", 3))
        acc = float(self.speculative.get("acceptance", 0.7))
        with self._lock:
            c = self.counters
            drafts = max(1, round(n_tokens / (1 + acc * k)))
            c["drafts"] += drafts
            c["draft_tokens"] += drafts * k
            c["accepted"] += round(drafts * k * acc)
            for pos in range(k):
                c["per_pos"][pos] = c["per_pos"].get(pos, 0) + round(drafts * acc ** (pos + 1) * 1.0)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "root": f"/models/{self.model}", "max_model_len": self.max_model_len}],
            }
        )

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.log.append({"path": request.path, "body": body, "t": time.time(), "auth": None})
        if "messages" in body:
            text = "".join(self.chat_template.format(role=m.get("role", ""), content=m.get("content", "")) for m in body["messages"])
            if body.get("add_generation_prompt", True):
                text += "<|assistant|>"
        else:
            text = body.get("prompt", "")
        toks = [_tok_id(p) for p in tokenize_text(text)]
        return web.json_response({"count": len(toks), "max_model_len": self.max_model_len, "tokens": toks})

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = [
            "# HELP vllm:num_requests_running Running requests.",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} 0.0',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{self.model}"}} {float(self.counters.get("kv_cache_usage", 0.0))}',
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{engine="0",model_name="{self.model}"}} {float(self.counters["generation_tokens"])}',
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="{self.model}"}} {float(self.counters["requests"])}',
        ]
        if self.speculative:
            c = self.counters
            lab = f'engine="0",model_name="{self.model}"'
            for name, value in (
                ("num_drafts", c["drafts"]),
                ("num_draft_tokens", c["draft_tokens"]),
                ("num_accepted_tokens", c["accepted"]),
            ):
                lines += [
                    f"# HELP vllm:spec_decode_{name}_total x",
                    f"# TYPE vllm:spec_decode_{name}_total counter",
                    f"vllm:spec_decode_{name}_total{{{lab}}} {float(value)}",
                ]
            lines += [
                "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total x",
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
            ]
            for pos, v in sorted(c["per_pos"].items()):
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{pos}"}} {float(v)}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
