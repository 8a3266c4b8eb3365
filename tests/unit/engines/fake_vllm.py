"""A stand-in for vLLM's API server: answers /health after a delay, or dies, as told.

Started by the launcher tests through the same command path as a real
server, so process-group cleanup and error messages are tested without vLLM.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--delay", type=float, default=0.0)
p.add_argument("--die", help="print this and exit 1 instead of serving")
p.add_argument("--child", action="store_true", help="fork a child that lingers, like vLLM's engine core")
p.add_argument("--pidfile")
a, _ = p.parse_known_args()

print("fake vllm starting", os.environ.get("VLLM_CPU_OMP_THREADS_BIND"), os.environ.get("TMPDIR"), flush=True)
if a.child:
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    if a.pidfile:
        with open(a.pidfile, "w") as f:
            f.write(str(pid))
if a.die:
    print(a.die, flush=True)
    sys.exit(1)
time.sleep(a.delay)


class H(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


HTTPServer(("127.0.0.1", a.port), H).serve_forever()
