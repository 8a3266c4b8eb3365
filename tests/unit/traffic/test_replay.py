"""`qualitycheck replay` end to end: logs of every format in, a suite out that validates, runs and gates, with no PII in it."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from qualitycheck.cli._main import main
from qualitycheck.core._cases import load_suite
from qualitycheck.core._errors import InputError
from qualitycheck.testserver import TestServer, ToolReply
from qualitycheck.traffic._manifest import ReplayManifest, read_replay_manifest, replay_json_schema
from qualitycheck.traffic._replay import ReplayOptions, replay, summary_lines
from qualitycheck.traffic._rules import load_rules

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay"
SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema" / "replay.schema.json"
LOGS = [FIXTURES / n for n in ("requests.jsonl", "batch_input.jsonl", "batch_output.jsonl", "traffic.csv")]
PLANTED: dict[str, list[str]] = json.loads((FIXTURES / "planted.json").read_text(encoding="utf-8"))


def planted_forms() -> list[str]:
    """Each planted value as written, and the digits alone of the number-shaped ones."""
    out = [v for vs in PLANTED.values() for v in vs]
    out += ["".join(ch for ch in v if ch.isdigit()) for k in ("card", "iban", "phone") for v in PLANTED[k]]
    return out


def assert_no_pii(folder: Path, *texts: str) -> None:
    """Search every byte written (and any captured output) for every planted value."""
    written = [(str(p), p.read_bytes()) for p in folder.rglob("*") if p.is_file()] + [("output", t.encode()) for t in texts]
    assert written
    for where, data in written:
        for value in planted_forms():
            assert value.encode() not in data, f"{value!r} written to {where}"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReplayManifest]:
    out = tmp_path_factory.mktemp("replayed") / "suite"
    manifest = replay(LOGS, out, ReplayOptions(rules=load_rules(FIXTURES / "rules.yaml")))
    return out, manifest


def test_every_format_is_read_and_nothing_planted_is_written(
    replayed: tuple[Path, ReplayManifest], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, m = replayed
    assert [s.format for s in m.sources] == ["request_response", "batch_input", "csv", "batch_output"]
    assert m.sources[-1].joined == 8  # every answered batch request found its answer
    assert all(n > 0 for n in m.redactions.values()), m.redactions  # every kind was planted and found
    assert_no_pii(out)
    # and through the command: its terminal output and error stream hold none either
    rc, stdout, stderr = run_cli(["replay", *map(str, LOGS), "--rules", str(FIXTURES / "rules.yaml"), "--out", str(tmp_path / "s")], capsys)
    assert rc == 0 and "cases in 6 categories" in stdout
    assert_no_pii(tmp_path / "s", stdout, stderr)
    assert all(len(line) <= 80 for line in stdout.splitlines()), stdout


def test_the_manifest_counts_add_up(replayed: tuple[Path, ReplayManifest]) -> None:
    out, m = replayed
    n = m.lines
    assert n.read == n.used + n.skipped + n.duplicates + n.not_sampled
    assert n.read == sum(s.lines for s in m.sources if s.format != "batch_output") == 58
    assert (n.used, n.skipped, n.duplicates, n.not_sampled) == (48, 9, 1, 0)
    assert m.skipped.count == n.skipped == len(m.skipped.reasons) == sum(m.skipped.by_reason.values())
    assert sum(c.cases for c in m.categories.values()) == n.used == sum(s.written for s in m.strata.values())
    assert sum(s.lines for s in m.strata.values()) == n.used + n.not_sampled
    written = {p.stem: len(p.read_text(encoding="utf-8").splitlines()) for p in out.glob("*.jsonl")}
    assert written == {c: cc.cases for c, cc in m.categories.items()}
    assert m.cases_without_check == 0  # the fixture rules name a judge
    assert read_replay_manifest(out / "replay.json") == m


def test_skipped_lines_are_listed_by_file_and_line_without_their_content(replayed: tuple[Path, ReplayManifest]) -> None:
    _, m = replayed
    req = str(FIXTURES / "requests.jsonl")
    assert f"{req}:31: message 0 has a role a case cannot send" in m.skipped.reasons  # that line holds an e-mail address
    assert f"{FIXTURES / 'batch_input.jsonl'}:11: url is not /v1/chat/completions or /v1/completions" in m.skipped.reasons
    assert f"{FIXTURES / 'traffic.csv'}:14: the prompt column is empty" in m.skipped.reasons
    assert all(r.count(": ") >= 1 and r.split(":")[1].isdigit() for r in m.skipped.reasons)


def test_the_suite_validates_and_carries_the_requests_own_settings(
    replayed: tuple[Path, ReplayManifest], capsys: pytest.CaptureFixture[str]
) -> None:
    out, m = replayed
    rc, stdout, _ = run_cli(["validate", str(out)], capsys)
    assert rc == 0 and stdout.startswith(f"{m.lines.used} cases OK in 6 categories")
    cases = {c.id: c for c in load_suite([out])}
    sql = [c for c in cases.values() if c.category == "sql" and c.params.get("stop")]
    assert sql and all(c.params["stop"] == [";"] and c.params["seed"] == 7 and c.params["temperature"] == 0 for c in sql)
    assert all(c.checks.exact is not None for c in sql)
    tools = [c for c in cases.values() if c.category == "tool_call"]
    assert tools and all(c.params["tools"] and c.checks.tool_calls is not None for c in tools)
    assert any(c.prompt is not None for c in cases.values())  # completions stay completions
    # ids are the log's own where it has one (batch custom_id, CSV request_id), else file and line
    assert {"req-000", "row-0", "code-0", "requests-1"} <= set(cases) and "requests-7" not in cases  # line 7 repeats line 3
    assert "batch_input-10" in cases and not any("@" in cid for cid in cases)  # a custom_id holding an address is not the id


def test_one_conversation_keeps_one_placeholder_per_value(replayed: tuple[Path, ReplayManifest]) -> None:
    out, _ = replayed
    support = [json.loads(line) for line in (out / "support.jsonl").read_text(encoding="utf-8").splitlines()]
    first = next(c for c in support if "<EMAIL_2>" in json.dumps(c))
    texts = [m["content"] for m in first["messages"]]
    assert "<EMAIL_1>" in texts[1] and "<EMAIL_1>" in texts[3] and "<EMAIL_2>" in texts[3]
    refund = next(json.loads(line) for line in (out / "tool_call.jsonl").read_text(encoding="utf-8").splitlines() if "IBAN" in line)
    user, call, tool = refund["messages"]
    assert "<IBAN_1>" in user["content"] and "<CARD_1>" in user["content"]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"])["iban"] == "<IBAN_1>"
    assert json.loads(tool["content"])["iban"] == "<IBAN_1>"


def _answer(body: dict[str, Any]) -> str | ToolReply:
    if body.get("tools"):
        return ToolReply((("lookup_order", '{"order_id": "88231"}'),))
    if body.get("response_format"):
        return '{"name": "Jane Doe", "email": "<EMAIL_1>"}'
    return "SELECT count(*) FROM singer" if "SQL" in json.dumps(body.get("messages")) else "A short answer."


def _changed_call(body: dict[str, Any]) -> str | ToolReply:
    if body.get("tools"):
        return ToolReply((("lookup_order", '{"order_id": "88232"}'),))
    return _answer(body)


def test_the_suite_runs_and_gates(replayed: tuple[Path, ReplayManifest], tmp_path: Path, pytester: pytest.Pytester) -> None:
    out, _ = replayed
    cfg = tmp_path / "qc.yaml"
    cfg.write_text("run:\n  preflight: false\n  noise_floor: none\n")
    with TestServer(default=_answer) as b, TestServer(default=_answer) as same, TestServer(default=_changed_call) as broken:
        common = ["--baseline", b.url, "--model", "m", "--suite", str(out), "-c", str(cfg)]
        assert main(["run", *common, "--candidate", same.url, "--out", str(tmp_path / "same")]) == 0
        assert main(["run", *common, "--candidate", broken.url, "--out", str(tmp_path / "broken")]) == 1
        sent = [r["body"] for r in b.requests("/chat/completions")]
    assert any(s.get("tools") and s.get("tool_choice") == "auto" for s in sent)
    summary = json.loads((tmp_path / "broken" / "summary.json").read_text(encoding="utf-8"))
    same_calls = summary["categories"]["tool_call"]["checks"]["tool_calls_same_as_baseline"]
    # the logged request that sampled (temperature > 0) is judged by its pass rates: identity with one baseline sample does not apply
    assert summary["categories"]["tool_call"]["sampled_cases"] == 1 and same_calls["skipped_as_sampled"] == 1
    assert len(same_calls["regressions"]) == 1
    res = pytester.runpytest("--qc-run", str(tmp_path / "same"))
    assert res.ret == 0
    res = pytester.runpytest("--qc-run", str(tmp_path / "broken"))
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*qualitycheck::regression::tool_call::tool_calls_same_as_baseline::*"])


def test_sampling_is_deterministic_and_stratified(tmp_path: Path) -> None:
    rules = load_rules(FIXTURES / "rules.yaml")
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        runs[name] = replay(LOGS, tmp_path / name, ReplayOptions(sample=20, seed=seed, rules=rules))
    files = {name: {p.name: p.read_bytes() for p in (tmp_path / name).glob("*.jsonl")} for name in runs}
    assert files["a"] == files["b"] and files["a"] != files["c"]
    m = runs["a"]
    assert m.lines.used == 20 and m.lines.read == m.lines.used + m.lines.skipped + m.lines.duplicates + m.lines.not_sampled
    assert m.options.sample == 20 and m.options.seed == 3
    # every stratum with cases is represented when the sample can afford one each
    strata = [s for s in m.strata.values() if s.lines]
    if len(strata) <= 20:
        assert all(s.written >= 1 for s in strata)
    assert all(s.written <= s.lines for s in m.strata.values())


def test_two_workers_write_what_one_writes(tmp_path: Path) -> None:
    rules = load_rules(FIXTURES / "rules.yaml")
    one = replay(LOGS, tmp_path / "one", ReplayOptions(sample=25, rules=rules, workers=1))
    two = replay(LOGS, tmp_path / "two", ReplayOptions(sample=25, rules=rules, workers=2))
    assert one.model_dump() == two.model_dump()
    for p in (tmp_path / "one").glob("*.jsonl"):
        assert (tmp_path / "two" / p.name).read_bytes() == p.read_bytes()


def test_gzip_and_parquet_logs_give_the_same_cases(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    zipped = tmp_path / "requests.jsonl"  # gzip under the plain name: recognised by its bytes
    zipped.write_bytes(gzip.compress((FIXTURES / "requests.jsonl").read_bytes()))
    parquet = tmp_path / "traffic.parquet"
    pd.read_csv(FIXTURES / "traffic.csv", dtype=str, keep_default_na=False).to_parquet(parquet)
    rules = load_rules(FIXTURES / "rules.yaml")
    plain = replay([FIXTURES / "requests.jsonl", FIXTURES / "traffic.csv"], tmp_path / "plain", ReplayOptions(rules=rules))
    other = replay([zipped, parquet], tmp_path / "other", ReplayOptions(rules=rules))
    assert [(s.format, s.compressed) for s in other.sources] == [("request_response", True), ("parquet", False)]
    assert other.lines == plain.lines and other.redactions == plain.redactions

    def cases(folder: Path) -> list[dict[str, Any]]:  # `source` names the file and line: a CSV counts its header as line 1
        return [{k: v for k, v in json.loads(line).items() if k != "source"} for p in sorted(folder.glob("*.jsonl")) for line in p.open()]

    assert cases(tmp_path / "other") == cases(tmp_path / "plain")
    assert_no_pii(tmp_path / "other")


def test_keep_pii_writes_what_was_logged(tmp_path: Path) -> None:
    m = replay([FIXTURES / "requests.jsonl"], tmp_path / "s", ReplayOptions(keep_pii=True))
    assert m.options.keep_pii and set(m.redactions.values()) == {0}
    assert PLANTED["email"][0] in "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "s").glob("*.jsonl"))
    assert "off (--keep-pii)" in "\n".join(summary_lines(m, tmp_path / "s"))


def test_open_requests_without_a_judge_are_counted(tmp_path: Path) -> None:
    m = replay([FIXTURES / "requests.jsonl"], tmp_path / "s")
    assert m.cases_without_check > 0 and m.categories["qa"].checks.get("none", 0) > 0
    assert "no check" in "\n".join(summary_lines(m, tmp_path / "s"))


# ------------------------------------------------------------------ bad input: exit 2, nothing written


def test_a_missing_log_is_an_input_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_cli(["replay", str(tmp_path / "nope.jsonl"), str(FIXTURES / "requests.jsonl"), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and f"{tmp_path / 'nope.jsonl'}: no such file" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def test_a_file_with_nothing_usable_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = (FIXTURES / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join(lines[27:33]) + "\n", encoding="utf-8")  # the fixture's six unusable lines
    rc, _, err = run_cli(["replay", str(bad), str(FIXTURES / "batch_input.jsonl"), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and f"{bad}: nothing usable: all 6 requests were skipped (first: {bad}:1: not JSON" in err
    assert "maria" not in err and not (tmp_path / "s").exists()


def test_bad_rules_and_columns_are_input_errors_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - match: {rout: a}\n    category: a\n", encoding="utf-8")
    rc, _, err = run_cli(["replay", str(FIXTURES / "requests.jsonl"), "--rules", str(rules), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and f"{rules}:2: rules.0.match.rout: unknown key" in err
    rules.write_text("columns:\n  prompt: question\n  response: reply\n", encoding="utf-8")
    rc, _, err = run_cli(["replay", str(FIXTURES / "traffic.csv"), "--rules", str(rules), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and f"{rules}:3: columns.response: no column 'reply' in {FIXTURES / 'traffic.csv'}" in err
    rc, _, err = run_cli(["replay", str(FIXTURES / "traffic.csv"), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and "no `messages` or `prompt` column" in err
    rules.write_text("judge: nosuchjudge\n", encoding="utf-8")
    rc, _, err = run_cli(["replay", str(FIXTURES / "requests.jsonl"), "--rules", str(rules), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and "judge.mode: unknown judge 'nosuchjudge'" in err
    assert not (tmp_path / "s").exists()


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_cli(["replay", str(FIXTURES / "requests.jsonl")], capsys)
    assert rc == 2 and "--out: required" in err
    rc, _, err = run_cli(["replay", str(FIXTURES / "requests.jsonl"), "--out", str(tmp_path / "s"), "--sample", "0"], capsys)
    assert rc == 2 and "--sample: expected a whole number of at least 1" in err
    rc, _, err = run_cli(["replay", str(FIXTURES / "batch_output.jsonl"), "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and "holds Batch API answers only" in err


def test_the_suite_folder_must_be_new_or_an_earlier_replay(tmp_path: Path) -> None:
    out = tmp_path / "s"
    out.mkdir()
    (out / "mine.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match=r"holds no replay\.json"):
        replay([FIXTURES / "requests.jsonl"], out)
    assert sorted(p.name for p in out.iterdir()) == ["mine.jsonl"]
    shutil.rmtree(out)
    first = replay([FIXTURES / "requests.jsonl", FIXTURES / "traffic.csv"], out, ReplayOptions(rules=load_rules(FIXTURES / "rules.yaml")))
    second = replay([FIXTURES / "requests.jsonl"], out)  # replaces the earlier replay's files, stale categories included
    assert set(first.categories) != set(second.categories)
    assert sorted(p.name for p in out.iterdir()) == sorted([*(c.file for c in second.categories.values()), "replay.json"])
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="did not write"):
        replay([FIXTURES / "requests.jsonl"], out)


def test_ids_repeated_across_logs_fall_back_to_file_and_line(tmp_path: Path) -> None:
    second = tmp_path / "batch_rerun.jsonl"  # another batch numbering its requests the same way
    lines = (FIXTURES / "batch_input.jsonl").read_text(encoding="utf-8").splitlines()
    second.write_text("\n".join(line.replace("Reply to", "Please reply to") for line in lines[:3]) + "\n", encoding="utf-8")
    m = replay([FIXTURES / "batch_input.jsonl", second], tmp_path / "s")
    ids = [c.id for c in load_suite([tmp_path / "s"])]
    assert len(ids) == len(set(ids)) and "req-001" in ids and "batch_rerun-2" in ids
    assert m.lines.duplicates == 2 and m.lines.skipped == 2  # the unchanged prompts repeat; GET and embeddings as before


def test_a_damaged_gzip_is_reported_not_a_crash(tmp_path: Path) -> None:
    data = gzip.compress((FIXTURES / "requests.jsonl").read_bytes() * 3)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    m = replay([cut], tmp_path / "s")
    assert m.lines.read == m.lines.used + m.lines.skipped + m.lines.duplicates + m.lines.not_sampled
    assert any("the rest of the file cannot be read" in r for r in m.skipped.reasons)


def test_the_manifest_schema_is_published(replayed: tuple[Path, ReplayManifest], capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = replayed
    rc, printed, _ = run_cli(["schema", "replay"], capsys)
    assert rc == 0 and printed == SCHEMA_FILE.read_text(encoding="utf-8"), (
        "run `qualitycheck schema replay > docs/schema/replay.schema.json`"
    )
    assert json.loads(printed) == replay_json_schema()
    data = json.loads((out / "replay.json").read_text(encoding="utf-8"))
    assert not list(Draft202012Validator(json.loads(printed)).iter_errors(data))
    assert data["format_version"] == 1


def test_a_large_log_is_sampled_in_bounded_memory(tmp_path: Path) -> None:
    """10,000 distinct requests through the parallel path: the counts add up and the sample holds N cases."""
    log = tmp_path / "big.jsonl"
    base = [json.loads(line) for line in (FIXTURES / "requests.jsonl").read_text(encoding="utf-8").splitlines()[:20]]
    with log.open("w", encoding="utf-8") as f:
        for i in range(10_000):
            line = dict(base[i % 20])
            req = dict(line["request"])
            req["messages"] = [*req.get("messages", [])[:-1], {"role": "user", "content": f"request {i}: maria.keller@example.com"}]
            line["request"] = req
            f.write(json.dumps(line) + "\n")
    m = replay([log], tmp_path / "s", ReplayOptions(sample=100, workers=2))
    assert m.lines.read == 10_000 == m.lines.used + m.lines.skipped + m.lines.duplicates + m.lines.not_sampled
    assert m.lines.used == 100 and m.lines.duplicates == 0 and m.redactions["email"] >= 100
    assert_no_pii(tmp_path / "s")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sampled_replay_redacts_only_the_cases_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """Candidates cross to the main process as logged and only the sample's are redacted, once each, as they are
    written: the suite, the counts and the placeholders are what redacting every candidate gave."""
    from qualitycheck.traffic._redact import Redactor

    log = tmp_path / "log.jsonl"
    with log.open("w", encoding="utf-8") as f:
        for i in range(600):
            text = f"case {i}: write to maria.keller{i % 7}@example.com or call +44 20 7946 0{i % 1000:03d}, card 4111 1111 1111 1111"
            f.write(json.dumps({"request": {"messages": [{"role": "user", "content": text}], "temperature": 0}}) + "\n")
    calls: list[int] = []
    real = Redactor.conversation

    def counted(self: Redactor, raw: bytes | None = None) -> Any:
        calls.append(1)
        return real(self, raw)

    monkeypatch.setattr(Redactor, "conversation", counted)  # one conversation per case redacted
    m = replay([log], tmp_path / "s", ReplayOptions(sample=25, seed=3, workers=workers))
    assert m.lines.used == 25
    assert len(calls) == 25 if workers == 1 else len(calls) <= 25  # with workers, this process counts its own only
    assert m.redactions["email"] == 25 and m.redactions["card"] == 25 and m.redactions["phone"] == 25
    cases = [json.loads(x) for x in (tmp_path / "s" / "qa.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all("<EMAIL_1>" in c["messages"][0]["content"] and "<CARD_1>" in c["messages"][0]["content"] for c in cases)
    assert "@example.com" not in (tmp_path / "s" / "qa.jsonl").read_text(encoding="utf-8")
    # the same suite as a replay that redacts in the workers (no sample: every case is written, each redacted there)
    whole = replay([log], tmp_path / "all", ReplayOptions(workers=workers))
    by_id = {json.loads(x)["id"]: x for x in (tmp_path / "all" / "qa.jsonl").read_text(encoding="utf-8").splitlines()}
    assert whole.redactions["email"] == 600
    assert all(by_id[c["id"]] == json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases)


def test_a_case_the_redactor_cannot_take_is_skipped_when_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampled case whose redaction fails is reported as a skipped line, never written as logged, never a crash."""
    from qualitycheck.traffic import _replay

    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(json.dumps({"request": {"messages": [{"role": "user", "content": f"mail {i}@example.com"}]}}) + "\n" for i in range(5)),
        encoding="utf-8",
    )

    def fails(case: dict[str, Any], redactor: Any, raw: bytes | None = None) -> Any:
        raise RecursionError

    monkeypatch.setattr(_replay, "redact_fields", fails)
    m = replay([log], tmp_path / "s", ReplayOptions(sample=3, workers=1))
    assert m.lines.used == 0 and m.lines.skipped == 3 and m.skipped.by_reason == {"nested too deeply": 3}
    assert not (tmp_path / "s" / "qa.jsonl").exists() or "@example.com" not in (tmp_path / "s" / "qa.jsonl").read_text()


def _awkward_log(path: Path) -> bytes:
    """The fixture's requests with CRLF endings, blank lines, a bad line, long lines and no final newline."""
    lines = (FIXTURES / "requests.jsonl").read_bytes().splitlines()
    out = []
    for i, line in enumerate(lines):
        out.append(line + (b"\r\n" if i % 3 == 0 else b"\n"))
        if i % 5 == 0:
            out.append(b"\n" if i % 2 else b"  \r\n")
    out.insert(4, b'{"request": {"messages": [{"role": "user", "content": "' + b"a long line " * 200 + b'"}]}}\n')
    out.insert(7, b'{"request": \n')
    data = b"".join(out).rstrip(b"\r\n")
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("sample", [None, 7])
def test_spans_workers_and_gzip_give_the_same_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: int | None) -> None:
    """An uncompressed log is cut into byte spans the workers read themselves; a gzip log is read line by line.
    Wherever the cuts fall and however many workers read, the suite and the manifest are the same."""
    from qualitycheck.traffic import _replay

    log = tmp_path / "requests.jsonl"
    data = _awkward_log(log)
    zipped = tmp_path / "zipped" / "requests.jsonl"
    zipped.parent.mkdir()
    zipped.write_bytes(gzip.compress(data))

    def run(name: str, path: Path, workers: int, span: int) -> tuple[dict[str, Any], dict[str, bytes]]:
        monkeypatch.setattr(_replay, "SPAN_BYTES", span)
        m = replay([path], tmp_path / name, ReplayOptions(sample=sample, seed=5, workers=workers)).model_dump()
        for s in m["sources"]:
            s.pop("path"), s.pop("compressed")
        m["skipped"]["reasons"] = [r.replace(str(path), "LOG") for r in m["skipped"]["reasons"]]
        files = {p.name: p.read_bytes() for p in (tmp_path / name).iterdir() if p.suffix == ".jsonl"}
        return m, files

    runs = [run("gzip", zipped, 1, 1 << 20)] + [run(f"w{w}-s{span}", log, w, span) for w in (1, 2) for span in (1, 97, 4096, 1 << 20)]
    assert runs[0][0]["lines"]["skipped"] >= 1 and runs[0][1]
    assert all(r == runs[0] for r in runs[1:])


def test_shapes_share_a_validation_only_when_they_are_the_same_json() -> None:
    """Each distinct shape of params and checks is validated once: its cache key tells apart every value
    validation could tell apart (1, 1.0 and true; NaN, which json.loads reads, and null)."""
    from qualitycheck.traffic._replay import _shape_key

    values = [1, 1.0, True, "1", None, float("nan"), float("inf"), [1], {"a": 1}, {"a": 1.0}, 2**70, -0.0, 0.0]
    keys = [_shape_key({"temperature": v}, {"exact": True}) for v in values]
    assert len(set(keys)) == len(values)
    assert _shape_key({"stop": ["x"], "seed": 3}, None) == _shape_key({"stop": ["x"], "seed": 3}, None)


def test_the_collector_is_left_as_it_was(tmp_path: Path) -> None:
    """Replay collects garbage rarely while it reads (a line's containers die with it), then puts the caller's settings back."""
    import gc

    before = gc.get_threshold()
    replay([FIXTURES / "requests.jsonl"], tmp_path / "s", ReplayOptions(workers=1))
    assert gc.get_threshold() == before and gc.isenabled()


def test_a_span_a_worker_cannot_read_is_one_skip_naming_its_lines(tmp_path: Path) -> None:
    from qualitycheck.traffic._formats import line_spans
    from qualitycheck.traffic._replay import _work

    log = tmp_path / "log.jsonl"
    log.write_bytes((FIXTURES / "requests.jsonl").read_bytes())
    (span,) = list(line_spans(log))
    (tmp_path / "rotated.jsonl").write_bytes(b"{}\n")
    (tmp_path / "rotated.jsonl").replace(log)
    result = _work((0, "requests", log.name, span), None)
    assert result.usable == 0 and result.cases == []
    ((line, reason),) = result.skips
    assert line == 1 and reason.startswith(f"lines 1 to {span.after - 1} cannot be read (SpanUnreadable") and "rotated" in reason


def test_the_schema_library_comes_without_its_iri_grammar_and_checks_iris_the_same() -> None:
    """Replay imports jsonschema before the workers fork; the grammar of the `iri` formats (seconds to build) is left
    for the first IRI checked, which then answers as a plain import of jsonschema does. Fresh interpreters:
    this one has imported jsonschema already."""
    import importlib.metadata
    import importlib.util
    import subprocess
    import sys

    version = tuple(int(x) for x in importlib.metadata.version("jsonschema").split(".")[:2])
    if importlib.util.find_spec("rfc3987_syntax") is None or version < (4, 25):
        pytest.skip("this jsonschema checks no IRI format (it does from 4.25, with rfc3987-syntax installed)")

    check = (
        "from jsonschema import validators; V = validators.Draft202012Validator; "
        "answers = [[e.message for e in V({'format': f}, format_checker=V.FORMAT_CHECKER).iter_errors(v)] "
        "for f in ('iri', 'iri-reference') for v in ('http://example.org/ä', 'a b ::', '#frag', 3)]; "
        "answers += [[e.message for e in V(V.META_SCHEMA, format_checker=V.FORMAT_CHECKER).iter_errors({'$id': i})] "
        "for i in ('http://example.org/s', 'not a uri ::')]"
    )
    deferred = (
        "import sys; from qualitycheck.traffic._replay import _import_schema_library; _import_schema_library(); "
        "assert 'jsonschema' in sys.modules and 'rfc3987_syntax' not in sys.modules; "
    )
    plain = subprocess.run([sys.executable, "-c", check + "; print(answers)"], capture_output=True, text=True, check=True).stdout
    lazy = subprocess.run(
        [sys.executable, "-c", deferred + check + "; print(answers); assert type(sys.modules['rfc3987_syntax']).__name__ == 'module'"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert lazy == plain and "is not a 'iri'" in plain and "is not a 'iri-reference'" in plain
