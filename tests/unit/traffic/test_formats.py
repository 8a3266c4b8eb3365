"""Log formats: detected per file by content (gzip by its magic bytes), read lazily, unusable lines explained."""

from __future__ import annotations

import gzip
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._errors import InputError
from qualitycheck.traffic._formats import (
    Columns,
    LogSource,
    SpanUnreadable,
    batch_outputs,
    detect,
    json_lines,
    line_spans,
    loads,
    logged_from_completion,
    parse_json_line,
    request_from_row,
    span_lines,
    table_chunks,
    table_columns,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay"


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("requests.jsonl", "request_response"),
        ("batch_input.jsonl", "batch_input"),
        ("batch_output.jsonl", "batch_output"),
        ("traffic.csv", "csv"),
    ],
)
def test_each_fixture_is_detected_by_its_content(name: str, fmt: str, tmp_path: Path) -> None:
    assert detect(FIXTURES / name) == LogSource(FIXTURES / name, fmt, False)  # type: ignore[arg-type]
    if fmt != "csv":  # a JSON log keeps its format under any name
        renamed = tmp_path / "export.log"
        renamed.write_bytes((FIXTURES / name).read_bytes())
        assert detect(renamed).format == fmt


def test_gzip_is_recognised_by_its_magic_bytes_whatever_the_name(tmp_path: Path) -> None:
    plain = FIXTURES / "requests.jsonl"
    for name in ("requests.jsonl.gz", "requests.jsonl", "requests.log"):
        f = tmp_path / name
        f.write_bytes(gzip.compress(plain.read_bytes()))
        src = detect(f)
        assert (src.format, src.compressed) == ("request_response", True)
        assert [raw for _, raw in json_lines(src)] == [raw for _, raw in json_lines(detect(plain))]
    csv = tmp_path / "traffic.csv.gz"
    csv.write_bytes(gzip.compress((FIXTURES / "traffic.csv").read_bytes()))
    src = detect(csv)
    assert (src.format, src.compressed) == ("csv", True)
    assert "question" in table_columns(src)


def test_parquet_is_recognised_by_its_magic_bytes(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    f = tmp_path / "traffic.data"
    pd.read_csv(FIXTURES / "traffic.csv", dtype=str, keep_default_na=False).to_parquet(f)
    src = detect(f)
    assert src.format == "parquet" and "question" in table_columns(src)
    chunks = list(table_chunks(src, Columns(prompt="question", response="answer"), 5))
    assert [len(c) for c in chunks] == [5, 5, 3] and chunks[0][0][0] == 1
    assert set(chunks[0][0][1]) == {"question", "answer"}  # only the mapped columns are read


def test_parquet_without_pyarrow_is_a_clear_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "t.parquet"
    f.write_bytes(b"PAR1" + b"\0" * 16)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # the import fails as it does without the extra
    with pytest.raises(InputError) as e:
        table_columns(detect(f))
    assert e.value.exit_code == 2 and "pip install 'qualitycheck[parquet]'" in str(e.value) and str(f) in str(e.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "empty log"),
        (b"\n\n  \n", "empty log"),
        (b'{"prompt": "hello"}\n', "not a log replay reads"),
        (b"just some text\n", "not a log replay reads"),
    ],
)
def test_a_file_replay_cannot_read_is_an_input_error_naming_it(tmp_path: Path, content: bytes | None, message: str) -> None:
    f = tmp_path / "x.jsonl"
    if content is not None:
        f.write_bytes(content)
    with pytest.raises(InputError) as e:
        detect(f)
    assert e.value.exit_code == 2 and str(e.value).startswith(f"{f}: ") and message in str(e.value)


def test_a_damaged_first_line_does_not_hide_the_format(tmp_path: Path) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text('{"request": {"messages": [\n' + (FIXTURES / "requests.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    assert detect(f).format == "request_response"


def test_json_lines_are_read_one_at_a_time() -> None:
    lines = json_lines(detect(FIXTURES / "requests.jsonl"))
    assert iter(lines) is lines  # a generator, not a list
    n, raw = next(lines)
    assert n == 1 and raw.startswith(b'{"request"')


SECRET = "maria.keller@example.com"


@pytest.mark.parametrize(
    ("fmt", "line", "reason"),
    [
        ("request_response", b'{"request": {"messages": "' + SECRET.encode(), "not JSON"),
        ("request_response", b"[1, 2]", "a JSON list, not an object"),
        ("request_response", json.dumps({"request": SECRET}).encode(), "the request body is not an object"),
        ("request_response", json.dumps({"request": {}, "tags": [SECRET]}).encode(), "tags is not an object"),
        ("request_response", json.dumps({"request": {}, "response": SECRET}).encode(), "response is neither"),
        ("batch_input", json.dumps({"custom_id": "", "body": {}}).encode(), "no custom_id"),
        ("batch_input", json.dumps({"custom_id": "a", "method": "GET", "url": "/v1/chat/completions", "body": {}}).encode(), "not POST"),
        ("batch_input", json.dumps({"custom_id": "a", "url": f"/v1/embeddings?{SECRET}", "body": {}}).encode(), "url is not"),
    ],
)
def test_a_line_that_cannot_be_read_gets_a_reason_that_quotes_nothing(fmt: str, line: bytes, reason: str) -> None:
    out = parse_json_line(fmt, line)  # type: ignore[arg-type]
    assert isinstance(out, str) and reason in out and SECRET not in out and "example" not in out


def test_request_response_lines_carry_body_tags_and_the_logged_answer() -> None:
    line = {
        "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {"team": "a", "route": "x"}},
        "response": {"choices": [{"message": {"role": "assistant", "content": "hello"}}], "usage": {"completion_tokens": 3}},
        "tags": {"route": "faq", "n": 5},
    }
    req = parse_json_line("request_response", json.dumps(line).encode())
    assert not isinstance(req, str)
    assert req.body["messages"] == line["request"]["messages"]  # type: ignore[index]
    assert req.tags == {"team": "a", "route": "faq", "n": "5"}  # the line's tags win over the request's metadata
    assert req.logged is not None and req.logged.text == "hello" and req.logged.output_tokens() == 3


def test_logged_answers_of_each_shape() -> None:
    calls = {"choices": [{"message": {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}}]}
    got = logged_from_completion(calls)
    assert got is not None and got.text is None and got.tool_calls == (("f", '{"a": 1}'),) and got.output_tokens() == 3
    text = logged_from_completion({"choices": [{"text": "x" * 40}]})
    assert text is not None and text.output_tokens() == 10  # about four characters a token without usage
    assert logged_from_completion(None) is None and logged_from_completion({"choices": []}) is None


def test_batch_outputs_are_joined_by_custom_id(tmp_path: Path) -> None:
    out = list(batch_outputs(detect(FIXTURES / "batch_output.jsonl"), keep_text=False))
    ok = {k: v for _, k, v in out if v is not None}
    assert len(out) == 9 and len(ok) == 8 and "req-004" not in ok  # the failed request has no answer
    assert all(v.text is None and v.completion_tokens is not None for v in ok.values())
    inputs = FIXTURES / "batch_input.jsonl"
    first = next(raw for _, raw in json_lines(detect(inputs)))
    req = parse_json_line("batch_input", first, ok)
    assert not isinstance(req, str) and req.key == "req-000" and req.logged == ok["req-000"]


def test_columns_map_dotted_tags_and_refuse_a_mapping_without_input() -> None:
    c = Columns.model_validate({"prompt": "q", "tags.route": "r", "tags": {"team": "t"}})
    assert c.tags == {"route": "r", "team": "t"} and c.used() == {"prompt": "q", "tags.route": "r", "tags.team": "t"}
    with pytest.raises(ValueError, match="map `messages` or `prompt`"):
        Columns.model_validate({"response": "a"})
    with pytest.raises(ValueError, match="not both"):
        Columns.model_validate({"messages": "m", "prompt": "p"})
    assert Columns.infer(["custom_id", "messages", "response", "tags.route"]) == Columns(
        messages="messages", response="response", id="custom_id", tags={"route": "tags.route"}
    )
    assert Columns.infer(["question", "answer"]) is None


def test_rows_become_requests_through_the_mapping() -> None:
    cols = Columns(prompt="q", system="s", response="a", completion_tokens="n", temperature="t", id="i", tags={"route": "r"})
    req = request_from_row({"q": "2+2?", "s": "Be brief.", "a": "4", "n": "1", "t": "0", "i": "row-1", "r": "math"}, cols)
    assert not isinstance(req, str)
    assert req.body == {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "temperature": 0.0}
    assert req.tags == {"route": "math"} and req.key == "row-1" and req.logged is not None and req.logged.output_tokens() == 1
    assert request_from_row({"q": "", "s": "", "a": "", "n": "", "t": "", "i": "", "r": ""}, cols) == "the prompt column is empty"
    assert request_from_row({"q": "x", "t": "warm"}, cols) == "the temperature column does not hold a float"
    msgs = Columns(messages="m", params="p")
    req = request_from_row({"m": '[{"role": "user", "content": "hi"}]', "p": '{"seed": 3}'}, msgs)
    assert not isinstance(req, str) and req.body == {"seed": 3, "messages": [{"role": "user", "content": "hi"}]}
    assert request_from_row({"m": "[{", "p": None}, msgs) == "the messages column is not JSON"
    assert request_from_row({"m": "[]", "p": "[1]"}, msgs) == "the params column is not a JSON object"


AWKWARD = [
    b'{"request": {"messages": [{"role": "user", "content": "one"}]}}\n',
    b"\n",  # blank lines are numbered, never yielded
    b'{"request": {"messages": [{"role": "user", "content": "two, CRLF"}]}}\r\n',
    b"   \t\r\n",
    b'{"request": {"messages": [{"role": "user", "content": "' + b"long " * 300 + b'"}]}}\n',  # longer than a small span
    b"\r\n",
    b'{"request": {"messages": [{"role": "user", "content": "a lone \\r inside\r"}]}}\n',
    b'{"request": {"messages": [{"role": "user", "content": "last, no newline"}]}}',
]


@pytest.mark.parametrize("size", [1, 2, 7, 64, 300, 1 << 20])
@pytest.mark.parametrize("ending", [b"", b"\n", b"\n\n"])
def test_spans_cut_at_newlines_and_give_the_lines_json_lines_gives(tmp_path: Path, size: int, ending: bytes) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"".join(AWKWARD) + ending)
    spans = list(line_spans(log, size))
    assert spans[0].start == 0 and spans[-1].end == log.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))  # whole file, no gap, no overlap
    data = log.read_bytes()
    assert all(data[s.end - 1 : s.end] == b"\n" for s in spans[:-1])  # a line straddling a cut goes whole to one span
    assert [x for s in spans for x in span_lines(s)] == list(json_lines(detect(log)))
    assert all(a.after == b.first for a, b in itertools.pairwise(spans))  # each span knows where the next one's numbering starts
    assert spans[-1].after == data.count(b"\n") + (0 if data.endswith(b"\n") else 1) + 1


def test_a_span_of_a_file_replaced_or_shortened_since_it_was_split_is_not_read(tmp_path: Path) -> None:
    """A rotated log is another file at the same path: its bytes must not be read as the old file's lines."""
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"".join(AWKWARD))
    spans = list(line_spans(log, 64))
    rotated = tmp_path / "new.jsonl"
    rotated.write_bytes(b"".join(AWKWARD))
    rotated.replace(log)  # same path, same bytes, another file
    with pytest.raises(SpanUnreadable, match="replaced"):
        span_lines(spans[0])
    spans = list(line_spans(log, 64))
    with log.open("r+b") as f:
        f.truncate(spans[-1].start + 1)
    with pytest.raises(SpanUnreadable, match="shorter"):
        span_lines(spans[-1])


def test_an_empty_file_has_no_span(tmp_path: Path) -> None:
    log = tmp_path / "empty.jsonl"
    log.write_bytes(b"")
    assert list(line_spans(log, 64)) == []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1, "a": 2, "b": [1.5e3, -0, 1e-7, 12345678901234567890123, null, true]}',
        b'{"t": NaN, "u": Infinity}',  # json.loads reads these; msgspec does not
        b"\xef\xbb\xbf{}",  # a byte-order mark
        '{"x": "é"}'.encode("utf-16"),
        b'"\\ud800 lone surrogate"',
        b'"\xed\xa0\x80"',
        b"1e400",
        b'{"a": 1,}',
        b'{"a": "\x01"}',
        b'"\xff"',
        b"",
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_loads_reads_what_json_loads_reads_and_fails_as_it_fails(raw: bytes) -> None:
    def outcome(f: Any) -> Any:
        try:
            return ("value", repr(f(raw)))
        except (ValueError, RecursionError) as exc:
            return ("error", type(exc), str(exc))

    assert outcome(loads) == outcome(json.loads)


_ANSWERS: list[Any] = [
    None,
    {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 7},
    },
    {"choices": [{"message": {"content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}}]},
    {"choices": [{"message": {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}}]},
    {"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}, {"function": None}, "x", None]}}]},
    {"choices": [{"message": {"content": [{"type": "text", "text": "parts"}]}}]},
    {"choices": [{"message": "a string"}, {"text": "second"}]},
    {"choices": [{"message": None, "text": "plain completion"}]},
    {"choices": [{"text": 5}]},
    {"choices": ["x"]},
    {"choices": []},
    {"choices": {"0": {}}},
    {"usage": {"completion_tokens": 3}},
    {"usage": {"completion_tokens": True}},
    {"usage": {"completion_tokens": -2}, "choices": [{"message": {"content": "abc"}}]},
    {"usage": {"completion_tokens": 1.5}},
    {"usage": {"completion_tokens": "3"}},
    {"usage": {"completion_tokens": 10**30}},
    {"usage": "none"},
    [],
    "text",
]


@pytest.mark.parametrize("answer", _ANSWERS)
@pytest.mark.parametrize(
    "rest",
    [
        {"request": {"messages": [{"role": "user", "content": "hi"}]}, "tags": {"route": "a", "n": 5, "off": None}, "id": "r-1"},
        {"request": {"prompt": "hi"}, "id": 3, "tags": None},
        {"request": [1], "tags": ["a"]},
        {"tags": {"route": "a"}},
    ],
)
def test_the_typed_decode_of_a_request_line_gives_what_the_generic_path_gives(
    answer: Any, rest: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Request/response lines are decoded into typed structs; a line they refuse (any other type anywhere
    in the fields read) goes to the generic path. Either way the request, or the reason, is the same."""
    from qualitycheck.traffic import _formats

    raws = [json.dumps({**rest, "response": answer}).encode()]
    raws.append(raws[0].replace(b'"request"', b'"request": 0, "request"', 1))  # a repeated key: the last one counts
    raws.append(raws[0][:-1] + b', "extra": NaN}')
    typed = [parse_json_line("request_response", raw) for raw in raws]
    monkeypatch.setattr(_formats, "_request_line", lambda raw: None)
    assert typed == [parse_json_line("request_response", raw) for raw in raws]


def test_a_well_formed_request_line_takes_the_typed_decode() -> None:
    from qualitycheck.traffic._formats import _request_line

    line = {"request": {"messages": []}, "response": _ANSWERS[1], "tags": {"route": "a"}}
    assert _request_line(json.dumps(line).encode()) == parse_json_line("request_response", json.dumps(line).encode())
    assert _request_line(json.dumps({**line, "response": _ANSWERS[3]}).encode()) is None  # arguments as an object: generic
