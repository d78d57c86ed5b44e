#!/usr/bin/env python3
"""A web service for tool-worker --http: the worker POSTs each CallRequest
as JSON; a 2xx body is the result, in the same forms as an --exec
program's stdout.

    python3 examples/python/http_tool.py --port 8090 &
    tool-worker --http convert_temperature=http://127.0.0.1:8090/

What the answers mean to the worker (docs/protocol.md, "The HTTP
executor"): 2xx is the result; 408, 429 and 5xx are retried within the
call's deadline; any other 4xx fails the call with its body, which the model
reads. The Idempotency-Key header is the same on every retry and
redelivery of one call: a repeat is answered from what was answered
before, so the call's effect happens once.

Standard library only (http.server). It prints "listening on URL" once it
accepts connections; --port 0 takes a free port.
"""
import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert import answer  # noqa: E402

MAX_BODY = 1 << 20


class Handler(BaseHTTPRequestHandler):
    # Answers by Idempotency-Key. A real service keeps them in its
    # database, for longer than a call's deadline.
    answered = {}
    lock = threading.Lock()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self.reply(413, {"error": "call request too large"})
        try:
            request = json.loads(self.rfile.read(length))
        except ValueError as e:
            # A 4xx other than 408 and 429 fails the call at once.
            return self.reply(400, {"error": "not JSON: %s" % e})
        key = self.headers.get("Idempotency-Key") or "%s:%s" % (request.get("run_id"), request.get("tool_call_id"))
        with self.lock:
            result = self.answered.get(key)
            if result is None:
                result = answer(request)
                if result.get("kind") == "tool-return":
                    result["metadata"]["mode"] = "http"
                    result["metadata"]["idempotency_key"] = key
                self.answered[key] = result
        self.reply(200, result)

    def reply(self, status, body):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, fmt, *args):
        print("%s %s" % (self.address_string(), fmt % args), file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090, help="0: a free port")
    a = p.parse_args()
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    host, port = server.server_address[:2]
    print("listening on http://%s:%d/" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
