"""The writer's per-pair work: the case validated as `Case.model_validate` would, its checks once per shape."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qualitycheck.core._cases import Case
from qualitycheck.core._checks import Checks
from qualitycheck.core._config import ShadowOptions, Target
from qualitycheck.core._config_file import Config
from qualitycheck.core._records import Response, ToolCall, Usage
from qualitycheck.core._store import RunStore
from qualitycheck.shadow._recorder import PairRecord, Recorder, _redacted
from qualitycheck.shadow._settings import ShadowSettings
from qualitycheck.shadow._tally import ShadowMetrics
from qualitycheck.traffic._redact import Redactor
from qualitycheck.traffic._rules import Rules, case_from_request


def answer(case_id: str, target: str, text: str) -> Response:
    return Response(
        case_id=case_id, target=target, fingerprint="f" * 20, text=text, usage=Usage(), chunk_times=[0.01, 0.02], started_at=time.time()
    )


def schema_request(i: int, order: str) -> dict[str, Any]:
    props = {"name": {"type": "string"}, "age": {"type": "integer"}}
    if order == "reversed":
        props = dict(reversed(props.items()))
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": props}}}
    return {"model": "m", "messages": [{"role": "user", "content": f"person {i}"}], "temperature": 0, "response_format": fmt}


REQUESTS = [
    {"model": "m", "messages": [{"role": "user", "content": "hello 0"}], "temperature": 0},
    {"model": "m", "messages": [{"role": "user", "content": "hello 1"}], "temperature": 0},
    schema_request(2, "declared"),
    schema_request(3, "reversed"),
    schema_request(4, "declared"),
    {"model": "m", "prompt": "Once upon", "temperature": 0.7},
    {"model": "m", "messages": [{"role": "user", "content": "mail jane.doe@example.com"}], "temperature": 0, "tags": ["x"]},
    {
        "model": "m",
        "messages": [{"role": "user", "content": "bad schema"}],
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}},
    },
    {"model": "m", "messages": [{"role": "user", "content": "bad tools"}], "tools": [{"type": "function", "function": {}}]},
]


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    cfg = Config(
        baseline=Target(url="http://127.0.0.1:9/v1", model="m"),
        candidate=Target(url="http://127.0.0.1:9/v1", model="m"),
        shadow=ShadowOptions(sample=1.0),
    )
    settings = ShadowSettings.of_config(cfg)
    rec = Recorder(
        settings.shadow,
        settings.folder,
        tmp_path / "run",
        Rules(),
        replica="r",
        listen="test",
        metrics=ShadowMetrics(),
        log=lambda _: None,
        noise_floor=False,
    )
    rec._open_folder()
    yield rec
    assert rec._store is not None
    rec._store.close()


def pair(i: int, body: dict[str, Any]) -> PairRecord:
    cid = f"c{i}"
    return PairRecord(
        cid, json.dumps(body).encode(), body, {}, [answer(cid, "baseline", "ok"), answer(cid, "candidate", "ok")], lambda: None
    )


def test_stored_cases_are_what_validating_each_drafted_case_gives(recorder: Recorder) -> None:
    """Same bodies as `Case.model_validate` of each drafted case, key order of a schema included; invalid ones are not cases."""
    recorder._store_pairs([pair(i, b) for i, b in enumerate(REQUESTS)])
    assert recorder._store is not None
    stored = {c.id: c for c in recorder._store.cases()}
    redactor = Redactor()
    refused = 0
    for i, body in enumerate(REQUESTS):
        drafted = case_from_request(body, {}, Rules(), redactor, case_id=f"c{i}", raw=json.dumps(body).encode())
        try:
            want: Case | None = Case.model_validate(drafted.case) if not isinstance(drafted, str) else None
        except ValueError:
            want = None
        got = stored.get(f"c{i}")
        refused += want is None
        assert (got.model_dump(mode="json") if got else None) == (want.model_dump(mode="json") if want else None), i
    assert list(stored["c3"].checks["json"].model_dump(by_alias=True)["schema"]["properties"]) == ["age", "name"]
    assert list(stored["c4"].checks["json"].model_dump(by_alias=True)["schema"]["properties"]) == ["name", "age"]
    assert refused and recorder._written.not_a_case == refused


def test_each_distinct_checks_is_validated_once(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[Any] = []
    real = Checks.model_validate.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Checks], data: Any) -> Checks:
        if not isinstance(data, Checks):
            validated.append(data)
        return real(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(Checks, "model_validate", classmethod(counting))
    same = [pair(i, {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "temperature": 0}) for i in range(20)]
    recorder._store_pairs(same)
    recorder._store_pairs([pair(100 + i, schema_request(i, "declared")) for i in range(5)])
    assert validated == [
        {"exact": True},
        {"json": {"schema": schema_request(0, "declared")["response_format"]["json_schema"]["schema"]}, "exact": True},
    ]
    assert recorder._written.stored == 25


def test_an_answer_without_pii_is_kept_as_it_is_and_one_with_pii_is_redacted() -> None:
    conv = Redactor().conversation()
    clean = answer("c1", "baseline", "nothing personal here")
    assert _redacted(clean, conv) is clean
    calls = answer("c1", "candidate", "").model_copy(
        update={"tool_calls": [ToolCall(name="send", arguments='{"to": "jane.doe@example.com"}')]}
    )
    out = _redacted(calls, conv)
    assert out is not calls and out.tool_calls is not None and "jane.doe@example.com" not in out.tool_calls[0].arguments
    assert out.model_dump(exclude={"tool_calls"}) == calls.model_dump(exclude={"tool_calls"})


def test_the_run_folder_reads_back_as_a_run(recorder: Recorder) -> None:
    recorder._store_pairs([pair(i, b) for i, b in enumerate(REQUESTS[:3])])
    assert recorder._store is not None
    folder = recorder._store.folder
    recorder._store.close()
    with RunStore.open(folder) as store:
        assert [c.id for c in store.cases()] == ["c0", "c1", "c2"]
        assert len(list(store.responses())) == 6
    recorder._store = RunStore.open(folder)
