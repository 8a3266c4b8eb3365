"""The launcher's lifecycle against a fake server: readiness, failure messages, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qualitycheck.engines._launcher import (
    LaunchError,
    VllmServer,
    _template_argv,
    api_server_argv,
    draft_model_config,
    free_port,
    launch_template,
    ngram_config,
)

FAKE = str(Path(__file__).with_name("fake_vllm.py"))


def _fake(*args: str, port: int | None = None, **kw: object) -> VllmServer:
    port = port or free_port()
    return VllmServer([sys.executable, FAKE, "--port", str(port), *args], port=port, name="fake", **kw)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_ready_server_gets_own_core_and_temp_dir_and_everything_is_removed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    with _fake("--delay", "0.5", "--child", "--pidfile", str(pidfile), core=1) as s:
        assert s.healthy()
        tmp = s.environment()["TMPDIR"]
        assert Path(tmp).is_dir()
        log = s.log_tail()
        assert "fake vllm starting 1 " + tmp in log
        child = int(pidfile.read_text())
        assert _alive(child)
        leader = s.pid
    assert leader is not None and not _alive(leader)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the engine-core-like child of the server outlived stop()"
    assert not Path(tmp).exists()


def test_a_server_has_its_own_process_group_in_the_launchers_session() -> None:
    """Its own group, so a stop reaches the engine-core child and a terminal's Ctrl-C does not; the launcher's
    session, because with the kernel's autogroup scheduling a new session is a new CPU group: servers in
    sessions of their own would outrank a launcher whose session runs at a lower priority, and starve it."""
    with _fake(core=0) as s:
        assert s.pid is not None
        assert os.getpgid(s.pid) == s.pid != os.getpgid(0)
        assert os.getsid(s.pid) == os.getsid(0)


def test_server_that_dies_raises_with_its_log_tail() -> None:
    s = _fake("--die", "ValueError: head size 16 is not supported")
    with pytest.raises(LaunchError) as err:
        s.wait_ready(timeout_s=30)
    msg = str(err.value)
    assert "exited with code 1" in msg and "head size 16 is not supported" in msg
    assert s.log_path is not None and s.log_path.is_file(), "the log the message names must survive cleanup"
    assert str(s.log_path) in msg
    s.log_path.unlink()
    assert not s.running


def test_server_that_never_answers_times_out_and_is_stopped() -> None:
    s = _fake("--delay", "60")
    with pytest.raises(LaunchError, match=r"did not answer .*/health within 1 s"):
        s.wait_ready(timeout_s=1)
    assert not s.running
    assert s.log_path is not None
    s.log_path.unlink()


def test_log_dir_keeps_the_log(tmp_path: Path) -> None:
    with _fake(log_dir=tmp_path) as s:
        pass
    assert (tmp_path / "vllm-fake.log").read_text().startswith("$ ")
    assert s.log_path == tmp_path / "vllm-fake.log"


def test_sigterm_to_the_parent_stops_its_servers(tmp_path: Path) -> None:
    pidfile = tmp_path / "server.pid"
    script = f"""
import sys, time
sys.path.insert(0, {str(Path(FAKE).parent)!r})
from qualitycheck.engines._launcher import VllmServer, free_port
port = free_port()
s = VllmServer([sys.executable, {FAKE!r}, "--port", str(port)], port=port, name="fake").start().wait_ready(30)
open({str(pidfile)!r}, "w").write(str(s.pid))
time.sleep(120)
"""
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.1)
    server_pid = int(pidfile.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == -signal.SIGTERM
    assert not _alive(server_pid)


def test_argv_carries_speculation_template_and_offline_flags() -> None:
    argv = api_server_argv(
        "/m",
        port=8001,
        served_name="smol",
        dtype="bfloat16",
        speculative_config=ngram_config(),
        chat_template="/t.jinja",
        extra_args=["--x"],
    )
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    assert argv[argv.index("--chat-template") + 1] == "/t.jinja"
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert "--enforce-eager" in argv and argv[-1] == "--x"
    assert draft_model_config("/d") == {"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}


def test_template_fills_port_and_model_and_runs_vllm_serve_as_module() -> None:
    argv = _template_argv('vllm serve {model} --port {port} --speculative-config \'{{"method":"ngram"}}\'', model="/m", port=9)
    assert argv == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m",
        "--port",
        "9",
        "--speculative-config",
        '{"method":"ngram"}',
    ]
    with pytest.raises(LaunchError, match=r"only \{port\} and \{model\}"):
        _template_argv("vllm serve {model} --port {prot}", model="/m", port=9)
    with pytest.raises(LaunchError, match=r"has no \{port\}"):
        launch_template("vllm serve {model}", model="/m")


def test_template_server_starts_and_stops() -> None:
    with launch_template(f"python {FAKE} --port {{port}}", model="/m", wait=False) as s:
        assert s.healthy()
    assert not s.running


def test_llama_argv_baseline_and_draft_candidate(tmp_path: Path) -> None:
    from qualitycheck.engines._launcher import llama_server_argv

    base = llama_server_argv("/m.gguf", port=9, served_name="smol", binary="/bin/llama-server")
    assert base[:3] == ["/bin/llama-server", "--model", "/m.gguf"] and "--metrics" in base
    assert "--model-draft" not in base and "--seed" not in base  # no server-wide seed: samples must be independent draws
    cand = llama_server_argv("/m.gguf", port=9, served_name="smol", binary="/bin/llama-server", draft="/d.gguf", draft_max=5)
    assert cand[cand.index("--model-draft") + 1] == "/d.gguf" and cand[cand.index("--spec-draft-n-max") + 1] == "5"
    assert cand[cand.index("--spec-type") + 1] == "draft-simple" and "--draft-max" not in cand  # removed in this llama.cpp


def test_llama_template_runs_the_built_binary_under_llama_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qualitycheck.engines._launcher import LlamaServer, _is_llama, llama_server_binary

    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\nimport runpy, sys\nrunpy.run_path({FAKE!r}, run_name='__main__')\n")
    binary.chmod(0o755)
    monkeypatch.setenv("QC_LLAMA_SERVER", str(binary))
    assert llama_server_binary() == binary
    argv = _template_argv("llama-server -m {model} --port {port} --spec-draft-n-max 3", model="/m.gguf", port=9)
    assert argv[0] == str(binary) and _is_llama(argv)
    with launch_template("llama-server --port {port}", model="/m", core=0) as s:
        assert isinstance(s, LlamaServer) and s.healthy() and s.log_path is not None and s.log_path.name == "llama-template.log"
        assert os.sched_getaffinity(s.pid or 0) == {0}  # held to its core before exec
    monkeypatch.setenv("QC_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(LaunchError, match="llama-server not found"):
        llama_server_binary()
