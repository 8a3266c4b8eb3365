"""Request logs as a stream of requests: each file's format detected, gzip read transparently, nothing held whole.

Formats, told apart by content rather than by name (a log is often renamed):

- OpenAI Batch API input: one `{"custom_id", "method", "url", "body"}` a line;
- Batch API output: `{"custom_id", "response": {"status_code", "body"}, "error"}`,
  joined to the input lines by `custom_id` when both files are given;
- request/response JSONL: `{"request": BODY, "response": COMPLETION | null, "tags": {...}}`;
- CSV (`.csv`, `.tsv`) and Parquet (its `PAR1` magic), with a column mapping.

A gzip file is recognised by its magic bytes whatever its name. Reading is
lazy everywhere: JSON lines one at a time, tables in chunks of rows, so a
log of ten million lines costs the memory of one chunk. Turning a line into a
request (`parse_json_line`, `request_from_row`) is separate from reading it,
so the costly part can run in worker processes on raw bytes, and a line that
cannot be used comes back as a reason, never an exception. Reasons name what
is wrong, never what the line says: the log holds users' words.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from qualitycheck.core._errors import InputError, Problem

__all__ = [
    "JSON_FORMATS",
    "SPAN_BYTES",
    "Columns",
    "LineSpan",
    "LogFormat",
    "LogSource",
    "Logged",
    "Request",
    "batch_outputs",
    "detect",
    "json_lines",
    "line_spans",
    "loads",
    "logged_from_completion",
    "open_log",
    "parse_json_line",
    "request_from_row",
    "span_lines",
    "table_chunks",
    "table_columns",
]

LogFormat = Literal["batch_input", "batch_output", "request_response", "csv", "parquet"]
JSON_FORMATS = ("batch_input", "batch_output", "request_response")
PARQUET_EXTRA = "parquet"
"""The optional extra that brings pyarrow (`pip install 'qualitycheck[parquet]'`)."""

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_SNIFF_LINES = 20
_ENDPOINTS = {"/v1/chat/completions": "chat", "/chat/completions": "chat", "/v1/completions": "completions", "/completions": "completions"}


@dataclass(frozen=True)
class LogSource:
    """One file of the log and what it holds."""

    path: Path
    format: LogFormat
    compressed: bool


@dataclass(frozen=True)
class Logged:
    """What production answered, as far as replay needs it: its length (a stratum) and its text (a judge's reference)."""

    text: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    """(name, argument text) of each call."""
    completion_tokens: int | None = None

    def output_tokens(self) -> int | None:
        """The answer's length in tokens: the logged usage, else about four characters a token."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        if self.text is None and not self.tool_calls:
            return None
        chars = len(self.text or "") + sum(len(n) + len(a) for n, a in self.tool_calls)
        return math.ceil(chars / 4)


@dataclass(frozen=True)
class Request:
    """One logged request, before it becomes a case."""

    body: dict[str, Any]
    """The request body as sent (chat: `messages`; completions: `prompt`), unredacted."""
    tags: dict[str, str]
    logged: Logged | None
    key: str | None
    """The log's own id for the request (`custom_id`, the id column), when it has one."""


class Columns(BaseModel):
    """Which column of a CSV or Parquet log holds what; `tags.NAME: column` adds a tag."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    messages: str | None = None
    """Chat messages: JSON text in a CSV, a list column in Parquet."""
    prompt: str | None = None
    """The user's prompt as plain text (one user message)."""
    system: str | None = None
    """A system prompt put before `prompt`."""
    response: str | None = None
    """The logged answer's text."""
    completion_tokens: str | None = None
    id: str | None = None
    model: str | None = None
    temperature: str | None = None
    max_tokens: str | None = None
    params: str | None = None
    """A JSON object of further request fields (tools, response_format, stop, seed, ...)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Tag name → column."""

    @model_validator(mode="before")
    @classmethod
    def _dotted_tags(cls, data: Any) -> Any:
        """`tags.route: col` (as the rules file writes it) joins the `tags` mapping."""
        if not isinstance(data, dict) or not any(isinstance(k, str) and k.startswith("tags.") for k in data):
            return data
        tags = data.get("tags", {})
        if not isinstance(tags, dict):
            return data  # the field's own validation names the problem
        tags = dict(tags)
        rest = {}
        for k, v in data.items():
            if isinstance(k, str) and k.startswith("tags."):
                tags[k.removeprefix("tags.")] = v
            elif k != "tags":
                rest[k] = v
        return {**rest, "tags": tags}

    @model_validator(mode="after")
    def _an_input(self) -> Columns:
        if self.messages is None and self.prompt is None:
            raise ValueError("map `messages` or `prompt` to a column")
        if self.messages is not None and (self.prompt is not None or self.system is not None):
            raise ValueError("map either `messages`, or `prompt` (with an optional `system`), not both")
        return self

    def used(self) -> dict[str, str]:
        """Field → column, for every mapped field (tags as `tags.NAME`)."""
        out = {k: v for k, v in self.model_dump(exclude={"tags"}).items() if v is not None}
        out.update({f"tags.{k}": v for k, v in self.tags.items()})
        return out

    @classmethod
    def infer(cls, header: list[str]) -> Columns | None:
        """The mapping a table gets without one: columns named like the fields (and `tags.*`); None if no input column."""
        names = set(header)
        fields = {f: f for f in cls.model_fields if f != "tags" and f in names}
        if "id" not in fields and "custom_id" in names:
            fields["id"] = "custom_id"
        if "messages" in fields:
            fields.pop("prompt", None)
            fields.pop("system", None)
        if "messages" not in fields and "prompt" not in fields:
            return None
        return cls.model_validate({**fields, **{c: c for c in header if c.startswith("tags.")}})


# ------------------------------------------------------------------ files


def open_log(path: Path) -> io.BufferedIOBase:
    """The file's bytes, decompressed when it starts with gzip's magic."""
    f = path.open("rb")
    if f.read(2) == _GZIP_MAGIC:
        f.close()
        return gzip.open(path, "rb")
    f.seek(0)
    return f


def _stem(path: Path) -> str:
    name = path.name
    return name[:-3] if name.endswith(".gz") else name


def detect(path: Path) -> LogSource:
    """The file's format from its first bytes and lines; an unreadable or unknown file is an InputError (exit 2)."""
    where = str(path)
    seen = 0
    if not path.exists():
        raise InputError([Problem(where, None, "", "no such file")])
    if path.is_dir():
        raise InputError([Problem(where, None, "", "is a folder; give the log files")])
    try:
        with path.open("rb") as f:
            head = f.read(4)
        compressed = head[:2] == _GZIP_MAGIC
        if head == _PARQUET_MAGIC:
            return LogSource(path, "parquet", False)
        if Path(_stem(path)).suffix.lower() in (".csv", ".tsv"):
            return LogSource(path, "csv", compressed)
        with open_log(path) as f:
            for raw in f:
                if not raw.strip():
                    continue
                seen += 1
                fmt = _json_format(raw)
                if fmt is not None:
                    return LogSource(path, fmt, compressed)
                if seen >= _SNIFF_LINES:
                    break
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError([Problem(where, None, "", f"cannot read: {getattr(exc, 'strerror', None) or type(exc).__name__}")]) from None
    if seen == 0:
        raise InputError([Problem(where, None, "", "empty log: no lines")])
    raise InputError(
        [
            Problem(
                where,
                None,
                "",
                "not a log replay reads: expected JSON lines of the Batch API ({custom_id, method, url, body}) or of requests "
                '({"request": ..., "response": ...}), a .csv/.tsv file, or Parquet',
            )
        ]
    )


def _json_format(raw: bytes) -> LogFormat | None:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "custom_id" in obj and "body" in obj:
        return "batch_input"
    if "custom_id" in obj and ("response" in obj or "error" in obj):
        return "batch_output"
    if "request" in obj:
        return "request_response"
    return None


def json_lines(source: LogSource) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of every non-blank line, read one at a time."""
    with open_log(source.path) as f:
        for n, raw in enumerate(f, 1):
            if not raw.isspace():  # all whitespace (a line is never empty): what strip() would empty, without copying the line
                yield n, raw


@dataclass(frozen=True)
class LineSpan:
    """Whole lines of an uncompressed file: bytes `start` to `end`, numbered `first` to `after - 1`.

    What a worker process is handed instead of the lines themselves: it reads
    the bytes on its own, so the process that splits the file touches each
    byte once, to count newlines. `file_id` (device and inode) is the file
    that was split: a worker that opens the path finds another file there
    when the log was rotated meanwhile, and must not read its bytes as these lines.
    """

    path: Path
    start: int
    end: int
    first: int
    after: int
    file_id: tuple[int, int]


class SpanUnreadable(OSError):
    """A span's bytes are not the ones that were split: the file was replaced or shortened since."""


_NEWLINE = 10
SPAN_BYTES = 1 << 20
"""Bytes of a span (more when one line is longer): about a thousand lines of a typical log."""


def line_spans(path: Path, size: int = SPAN_BYTES) -> Iterator[LineSpan]:
    """The file cut at newlines into spans of about `size` bytes, in order, numbered as `json_lines` numbers lines."""
    buf = bytearray(size)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        file_id = (st.st_dev, st.st_ino)
        start, pos, line = 0, 0, 1
        while got := f.readinto(view):
            pos += got
            cut = buf.rfind(b"\n", 0, got)
            if cut < 0:  # a line longer than the span so far: it joins the next span
                continue
            end = pos - got + cut + 1
            # the bytes before this block since `start` hold no newline; numpy compares many bytes at a time, bytes.count one
            lines = int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8, count=got) == _NEWLINE))
            yield LineSpan(path, start, end, line, line + lines, file_id)
            line += lines
            start = end
        if pos > start:
            yield LineSpan(path, start, pos, line, line + 1, file_id)


def span_lines(span: LineSpan) -> list[tuple[int, bytes]]:
    """(line number, raw bytes) of every non-blank line of the span: what `json_lines` yields for those lines.

    Raises `SpanUnreadable` when the path now holds another file or fewer bytes than were split.
    """
    with span.path.open("rb") as f:
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino) != span.file_id:
            raise SpanUnreadable(f"{span.path} was replaced while it was read (rotated?)")
        f.seek(span.start)
        data = f.read(span.end - span.start)
    if len(data) != span.end - span.start:
        raise SpanUnreadable(f"{span.path} is shorter than when it was split (truncated while it was read?)")
    return [(n, raw) for n, raw in enumerate(io.BytesIO(data), span.first) if not raw.isspace()]


# ------------------------------------------------------------------ JSON lines → requests


def _tags(value: Any) -> dict[str, str] | str:
    if value is None:
        return {}
    if not isinstance(value, dict):
        return "tags is not an object"
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items() if v is not None}


def _first_choice(body: Any) -> dict[str, Any] | None:
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def logged_from_completion(body: Any) -> Logged | None:
    """The answer of a logged chat completion or text completion; None when it holds none."""
    choice = _first_choice(body)
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None
    if choice is None:
        return Logged(completion_tokens=tokens) if tokens is not None else None
    msg = choice.get("message")
    if isinstance(msg, dict):
        content = msg.get("content")
        text = content if isinstance(content, str) else None
        calls = []
        for c in msg.get("tool_calls") or []:
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                args = fn.get("arguments")
                calls.append((fn["name"], args if isinstance(args, str) else json.dumps(args)))
        return Logged(text, tuple(calls), tokens)
    text = choice.get("text")
    return Logged(text if isinstance(text, str) else None, (), tokens)


def _body_request(body: Any, tags: dict[str, str], logged: Logged | None, key: str | None) -> Request | str:
    if not isinstance(body, dict):
        return "the request body is not an object"
    meta = body.get("metadata")
    if isinstance(meta, dict):  # OpenAI's per-request metadata: the log's own tags
        tags = {**{str(k): str(v) for k, v in meta.items() if v is not None}, **tags}
    return Request(body, tags, logged, key)


_decode = msgspec.json.Decoder().decode


def loads(raw: bytes) -> Any:
    """`json.loads`, faster: msgspec's decoder for what it reads, `json.loads` for everything else.

    msgspec reads strict JSON to the same values; what it refuses
    (`NaN`, a byte-order mark, UTF-16, a lone surrogate escape, a bad line)
    goes to `json.loads`, which then decides: the same value, or the same
    error and message.
    """
    try:
        return _decode(raw)
    except Exception:
        return json.loads(raw)


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct):
    function: _Function | None = None


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _Message | None = None
    text: str | None = None


class _Usage(msgspec.Struct):
    completion_tokens: int | None = None


class _Completion(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None


class _RequestLine(msgspec.Struct):
    """A request/response line as a well-formed log writes it: the answer read into its few fields replay needs.

    Decoding into these types skips what replay never reads (ids, roles,
    finish reasons, other usage counts) and the checks a dict would need.
    Whatever has another type anywhere in those fields is refused as a
    whole and read by the generic path, which then decides, so a line gives
    the same request (or the same reason) either way.
    """

    request: Any = None
    response: _Completion | None = None
    tags: dict[str, Any] | None = None
    id: Any = None


_decode_request_line = msgspec.json.Decoder(_RequestLine).decode


def _logged_typed(response: _Completion | None) -> Logged | None:
    """`logged_from_completion` for a completion of the expected types."""
    if response is None:
        return None
    tokens = response.usage.completion_tokens if response.usage is not None else None
    if tokens is not None and tokens < 0:
        tokens = None
    if not response.choices:
        return Logged(completion_tokens=tokens) if tokens is not None else None
    choice = response.choices[0]
    msg = choice.message
    if msg is None:
        return Logged(choice.text, (), tokens)
    calls = tuple((c.function.name, c.function.arguments) for c in msg.tool_calls or () if c.function is not None)
    return Logged(msg.content, calls, tokens)


def _request_line(raw: bytes) -> Request | str | None:
    """A request/response line through the typed decoder; None when it refuses the line (the generic path reads it)."""
    try:
        line = _decode_request_line(raw)
    except Exception:  # any refusal (a type, malformed JSON, nesting): the generic path gives the value or the reason
        return None
    tags = _tags(line.tags)
    if isinstance(tags, str):
        return tags
    key = line.id if isinstance(line.id, str) else None
    return _body_request(line.request, tags, _logged_typed(line.response), key)


def parse_json_line(fmt: LogFormat, raw: bytes, outputs: dict[str, Logged] | None = None) -> Request | str:
    """One line of a JSON log as a request, or why it cannot be one."""
    if fmt == "request_response":
        typed = _request_line(raw)
        if typed is not None:
            return typed
    try:
        obj = loads(raw)
    except ValueError as exc:
        return f"not JSON ({exc.msg}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else "not JSON"
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    if fmt == "batch_input":
        key = obj.get("custom_id")
        if not isinstance(key, str) or not key:
            return "no custom_id"
        method = obj.get("method", "POST")
        if method != "POST":
            return "method is not POST"
        url = obj.get("url")
        if url not in _ENDPOINTS:
            return "url is not /v1/chat/completions or /v1/completions"
        logged = outputs.get(key) if outputs else None
        return _body_request(obj.get("body"), {}, logged, key)
    if fmt == "request_response":
        tags = _tags(obj.get("tags"))
        if isinstance(tags, str):
            return tags
        response = obj.get("response")
        if response is not None and not isinstance(response, dict):
            return "response is neither a completion object nor null"
        key = obj.get("id") if isinstance(obj.get("id"), str) else None
        return _body_request(obj.get("request"), tags, logged_from_completion(response), key)
    return "not a request line"


def batch_outputs(source: LogSource, keep_text: bool) -> Iterator[tuple[int, str | None, Logged | None]]:
    """(line, custom_id, answer) of each Batch API output line; the answer is None for a failed request.

    `keep_text` False keeps only the length: the answers' text is needed
    only as a judge's reference, and a batch of 50,000 answers is not small.
    """
    for n, raw in json_lines(source):
        try:
            obj = json.loads(raw)
        except ValueError:
            yield n, None, None
            continue
        key = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(key, str):
            yield n, None, None
            continue
        response = obj.get("response")
        ok = isinstance(response, dict) and response.get("status_code", 200) == 200 and not obj.get("error")
        logged = logged_from_completion(response.get("body")) if ok and isinstance(response, dict) else None
        if logged is not None and not keep_text:
            logged = Logged(None, (), logged.output_tokens())
        yield n, key, logged


# ------------------------------------------------------------------ tables


def _pyarrow_parquet(source: LogSource) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            [
                Problem(
                    str(source.path),
                    None,
                    "",
                    f"is Parquet, which needs pyarrow: pip install 'qualitycheck[{PARQUET_EXTRA}]'",
                )
            ]
        ) from None
    return pq


def table_columns(source: LogSource) -> list[str]:
    """The column names of a CSV or Parquet log (its header), read without reading the rows."""
    try:
        if source.format == "parquet":
            pq = _pyarrow_parquet(source)
            return [str(n) for n in pq.ParquetFile(source.path).schema_arrow.names]
        import pandas as pd

        head = pd.read_csv(source.path, nrows=0, **_csv_options(source))
        return [str(c) for c in head.columns]
    except InputError:
        raise
    except Exception as exc:  # pandas and pyarrow raise their own types for a damaged file
        raise InputError([Problem(str(source.path), None, "", f"cannot read the table: {type(exc).__name__}")]) from None


def _csv_options(source: LogSource) -> dict[str, Any]:
    return {
        "sep": "\t" if Path(_stem(source.path)).suffix.lower() == ".tsv" else ",",
        "compression": "gzip" if source.compressed else None,
        "dtype": str,
        "keep_default_na": False,
    }


def table_chunks(source: LogSource, columns: Columns, rows: int) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """Chunks of (row number, {column: value}) holding only the mapped columns; row 1 is a CSV's header."""
    wanted = sorted(set(columns.used().values()))
    if source.format == "parquet":
        pq = _pyarrow_parquet(source)
        n = 0
        for batch in pq.ParquetFile(source.path).iter_batches(batch_size=rows, columns=wanted):
            chunk = []
            for row in batch.to_pylist():
                n += 1
                chunk.append((n, row))
            yield chunk
        return
    import pandas as pd

    n = 1
    reader = pd.read_csv(source.path, chunksize=rows, usecols=wanted, **_csv_options(source))
    with reader:
        for frame in reader:
            chunk = []
            for row in frame.to_dict("records"):
                n += 1
                chunk.append((n, row))
            yield chunk


def _cell(row: dict[str, Any], column: str | None) -> Any:
    if column is None:
        return None
    v = row.get(column)
    if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
        return None
    return v


def _json_cell(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


def request_from_row(row: dict[str, Any], columns: Columns) -> Request | str:
    """One table row as a request, through the column mapping, or why it cannot be one."""
    body: dict[str, Any] = {}
    params = _cell(row, columns.params)
    if params is not None:
        try:
            params = _json_cell(params)
        except ValueError:
            return "the params column is not JSON"
        if not isinstance(params, dict):
            return "the params column is not a JSON object"
        body.update(params)
    if columns.messages is not None:
        messages = _cell(row, columns.messages)
        if messages is None:
            return "the messages column is empty"
        try:
            messages = _json_cell(messages)
        except ValueError:
            return "the messages column is not JSON"
        body["messages"] = messages
    else:
        prompt = _cell(row, columns.prompt)
        if prompt is None:
            return "the prompt column is empty"
        system = _cell(row, columns.system)
        body["messages"] = ([{"role": "system", "content": str(system)}] if system is not None else []) + [
            {"role": "user", "content": str(prompt)}
        ]
    for name, conv in (("model", str), ("temperature", float), ("max_tokens", int)):
        v = _cell(row, getattr(columns, name))
        if v is not None:
            try:
                body[name] = conv(v)
            except (TypeError, ValueError):
                return f"the {name} column does not hold a {conv.__name__}"
    text = _cell(row, columns.response)
    tokens = _cell(row, columns.completion_tokens)
    if tokens is not None:
        try:
            tokens = int(tokens)
        except (TypeError, ValueError):
            return "the completion_tokens column does not hold a whole number"
    logged = Logged(str(text), (), tokens) if text is not None or tokens is not None else None
    tags = {name: str(v) for name, col in columns.tags.items() if (v := _cell(row, col)) is not None}
    key = _cell(row, columns.id)
    return Request(body, tags, logged, str(key) if key is not None else None)
