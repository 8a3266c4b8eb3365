"""Bad input, generated: random and mutated suites and configs end in a clear error, never a traceback.

Whatever bytes a suite or config file holds, `qualitycheck.cli._main.main` must
return 0 or 2 and every problem line must name the file (and, where one
exists, the line and field), because CI logs are all a user gets.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qualitycheck.cli._main import build_parser, main
from qualitycheck.cli._options import REPORT_OPTIONS, RUN_OPTIONS, TARGET_OPTIONS, config_overrides
from qualitycheck.core._config_file import load_config
from qualitycheck.core._errors import ConfigError

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID_CASE: dict[str, Any] = {
    "id": "c1",
    "category": "qa",
    "messages": [{"role": "user", "content": "What is 6*7?"}],
    "params": {"temperature": 0, "max_tokens": 16},
    "checks": {"exact": "42", "contains": ["4"], "regex": "\\d+", "json": {"schema": {"type": "object"}}},
    "tags": {"route": "math"},
}
VALID_CONFIG: dict[str, Any] = {
    "baseline": {"url": "http://127.0.0.1:9", "model": "m"},
    "candidate": {"url": "http://127.0.0.1:9/v1", "model": "m", "headers": {"X-A": "b"}},
    "run": {"concurrency": 4, "timeout_s": 1, "retries": 0, "repeats": 1},
    "speculative_decoding_guardrails": {"min_acceptance_rate": 0.55, "max_error_rate": "1%"},
}

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=False), st.text(max_size=20))
json_value = st.recursive(
    json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=12), kids, max_size=4)), max_leaves=12
)


def cli(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in-process; any exception escaping main() fails the test with its traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def assert_clear(code: int, err: str, path: Path) -> None:
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines, "exit 2 without a message"
        for ln in lines:
            assert str(path) in ln, f"problem line does not name the file: {ln!r}"


def mutate(base: Any, path: list[Any], value: Any, op: str) -> Any:
    """Replace, delete or add at `path` (a list of keys/indices that may not exist)."""
    if not path:
        return value
    if isinstance(base, dict) and base:
        key = list(base)[hash(str(path[0])) % len(base)]
        out = dict(base)
        if len(path) == 1 and op == "delete":
            out.pop(key)
        elif len(path) == 1 and op == "add":
            out[str(path[0])] = value
        else:
            out[key] = mutate(base[key], path[1:], value, op)
        return out
    if isinstance(base, list) and base:
        i = hash(str(path[0])) % len(base)
        out_l = list(base)
        out_l[i] = mutate(base[i], path[1:], value, op)
        return out_l
    return value


mutation = st.tuples(st.lists(st.text(max_size=4), min_size=1, max_size=4), json_value, st.sampled_from(["replace", "delete", "add"]))


@FUZZ
@given(lines=st.lists(st.one_of(json_value.map(json.dumps), st.text(max_size=60)), min_size=1, max_size=6))
def test_random_jsonl_suites(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "suite.jsonl"
        f.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        assert_clear(*cli(["validate", str(f)]), f)


@FUZZ
@given(muts=st.lists(mutation, min_size=1, max_size=3), n=st.integers(1, 3))
def test_mutated_cases_jsonl_and_yaml(muts: list[tuple[list[Any], Any, str]], n: int) -> None:
    cases = []
    for i in range(n):
        case = dict(VALID_CASE, id=f"c{i}")
        for path, value, op in muts:
            case = mutate(case, path, value, op)
        cases.append(case)
    with tempfile.TemporaryDirectory() as td:
        for name, text in (("s.jsonl", "\n".join(json.dumps(c) for c in cases)), ("s.yaml", yaml.safe_dump(cases, allow_unicode=True))):
            f = Path(td) / name
            f.write_text(text, encoding="utf-8")
            assert_clear(*cli(["validate", str(f)]), f)


@FUZZ
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".jsonl", ".yaml"]))
def test_arbitrary_bytes_including_invalid_utf8(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / f"suite{suffix}"
        f.write_bytes(data)
        assert_clear(*cli(["validate", str(f)]), f)


@FUZZ
@given(muts=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_configs(muts: list[tuple[list[Any], Any, str]]) -> None:
    cfg: Any = VALID_CONFIG
    for path, value, op in muts:
        cfg = mutate(cfg, path, value, op)
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "qualitycheck.yaml"
        f.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
        argv = ["run", "-c", str(f), "--suite", str(Path(td) / "missing.jsonl"), "--out", str(Path(td) / "run"), "--no-preflight"]
        try:  # the config as the CLI reads it: with the flags' overrides applied
            load_config(f, config_overrides(vars(build_parser().parse_args(argv)), (*TARGET_OPTIONS, *RUN_OPTIONS, *REPORT_OPTIONS)))
            config_ok = True
        except ConfigError:
            config_ok = False
        # the suite does not exist: a valid config gets as far as the suite and stops there (exit 2)
        code, err = cli(argv)
        assert code == 2 and "Traceback" not in err, err
        missing = str(Path(td) / "missing.jsonl")
        assert (str(f) in err or missing in err) if config_ok else str(f) in err, err


@FUZZ
@given(data=st.binary(max_size=200))
def test_config_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "qualitycheck.yaml"
        f.write_bytes(data)
        code, err = cli(["run", "-c", str(f), "--suite", str(Path(td) / "missing.jsonl"), "--no-preflight", "--out", str(Path(td) / "run")])
        assert code == 2 and "Traceback" not in err and err.strip(), err
