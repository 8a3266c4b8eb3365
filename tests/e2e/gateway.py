"""Debian's nginx as a production gateway that mirrors requests, and `qualitycheck shadow --sink` as its mirror's target.

The gateway is configured the way docs/stages/shadow.md tells users to:
`mirror` with `mirror_request_body on` in the location that proxies to the
baseline, an internal location that proxies the copy to the sink, and
`proxy_buffering off` so streams reach callers as they are generated.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file() else None)


def need_nginx() -> str:
    """The nginx binary; in CI (env CI) a missing one fails, elsewhere the test is skipped and says how to install it."""
    if NGINX is None:
        why = "nginx is not installed (bash scripts/dev.sh setup installs Debian's nginx)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return NGINX


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _hostport(url: str) -> str:
    u = urlsplit(url)
    return f"{u.hostname}:{u.port}"


NGINX_CONF = """
daemon off;
{user}
worker_processes 1;
error_log {d}/error.log info;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;

    upstream baseline {{ server {baseline}; keepalive 16; }}
    upstream sink {{ server {sink}; keepalive 16; }}

    server {{
        listen 127.0.0.1:{port};

        location /v1/ {{
            mirror /_mirror;
            mirror_request_body on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_pass http://baseline;
        }}

        location = /_mirror {{
            internal;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host-shadow;
            proxy_connect_timeout 1s;
            proxy_read_timeout 60s;
            proxy_pass http://sink$request_uri;
        }}
    }}
}}
"""
"""`Host: ...-shadow` as Envoy and Istio set it; nginx itself keeps the caller's Host unless told otherwise."""


@contextmanager
def nginx_gateway(folder: Path, baseline: str, sink: str) -> Iterator[str]:
    """nginx on a free loopback port, proxying /v1/ to `baseline` and mirroring each request to `sink`; yields its URL."""
    binary = need_nginx()
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    user = "user root;" if os.geteuid() == 0 else ""  # workers otherwise drop to nobody, who cannot write the temp folders here
    conf = folder / "nginx.conf"
    conf.write_text(NGINX_CONF.format(user=user, d=folder, baseline=_hostport(baseline), sink=_hostport(sink), port=port), encoding="utf-8")
    log = folder / "nginx.out"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(folder)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"nginx did not start: {log.read_text(errors='replace')}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful: lets in-flight requests finish
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Sink:
    """A `qualitycheck shadow --sink` process: its URL, its log, and its /qc/metrics read by name."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path, out: Path):
        self.proc, self.url, self.log, self.out = proc, url, log, out

    def metric(self, name: str, **labels: str) -> float:
        text = get(self.url + "/qc/metrics")
        want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
        for line in text.splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0

    def wait_metric(self, name: str, at_least: float, timeout: float = 300, **labels: str) -> None:
        deadline = time.monotonic() + timeout
        while self.metric(name, **labels) < at_least:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{name}{labels} never reached {at_least}:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)

    def stop(self, timeout: float = 600) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@contextmanager
def sink_process(work: Path, *args: str, port: int = 0) -> Iterator[Sink]:
    out = work / "sink-run"
    log = work / "sink.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qualitycheck", "shadow", "--sink", "--listen", f"127.0.0.1:{port}", "--out", str(out), *args],
            stdout=err,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        )
    try:
        deadline = time.monotonic() + 120
        while not (m := re.search(r"sink listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the sink did not start (exit {proc.poll()}):\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield Sink(proc, m.group(1), log, out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def get(url: str) -> str:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("GET", u.path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()
