#!/usr/bin/env python3
"""A real webhook receiver for the delivery tests.

Every request is verified with the reference Standard Webhooks library
(`standardwebhooks` on PyPI), once per configured secret, and recorded as one
JSON line: {path, webhook_id, timestamp, signature, verified, verified_with,
body, answered}. `verified_with` lists the indexes of the --secret arguments
that verify the request.

Behaviour is chosen per endpoint by the query string of its URL:
  ?status=500        always answer that status
  ?fail_first=2      answer 500 to the first 2 requests of each webhook-id
  ?redirect=1        answer 307 with Location: /ok
  ?delay_ms=20       wait that long before answering
Otherwise: 200.

Prints "listening on PORT" once bound (port 0 picks a free one).
GET /received returns every record as a JSON array.
POST /_control/secrets with a JSON array of secrets trusts them too, after
those already trusted (the API hands an endpoint's secret out only once the
endpoint, and so the receiver's URL, exists). Not recorded.
"""

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from standardwebhooks import Webhook


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", required=True, help="JSON-lines file to append records to")
    parser.add_argument("--secret", action="append", default=[], help="whsec_... (repeatable)")
    args = parser.parse_args()

    verifiers = [Webhook(s) for s in args.secret]
    lock = threading.Lock()
    seen = defaultdict(int)
    records = []
    out = open(args.record, "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are separate writes: with Nagle on, each answer
        # waits for the client's delayed ACK (40 ms).
        disable_nagle_algorithm = True

        def log_message(self, *_):
            pass

        def answer(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if urlsplit(self.path).path == "/received":
                with lock:
                    body = json.dumps(records).encode()
                self.answer(200, body, [("Content-Type", "application/json")])
            else:
                self.answer(404)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            split = urlsplit(self.path)
            if split.path == "/_control/secrets":
                with lock:
                    verifiers.extend(Webhook(s) for s in json.loads(raw))
                    trusted = len(verifiers)
                self.answer(200, json.dumps(trusted).encode(), [("Content-Type", "application/json")])
                return
            query = {k: v[0] for k, v in parse_qs(split.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            msg_id = headers.get("webhook-id")

            with lock:
                current = list(verifiers)
            verified_with = []
            for i, verifier in enumerate(current):
                try:
                    verifier.verify(raw, headers)
                    verified_with.append(i)
                except Exception:
                    pass
            try:
                body = json.loads(raw)
            except Exception:
                body = raw.decode("utf-8", "replace")

            with lock:
                seen[msg_id] += 1
                nth = seen[msg_id]
            if "status" in query:
                status = int(query["status"])
            elif nth <= int(query.get("fail_first", 0)):
                status = 500
            elif "redirect" in query:
                status = 307
            else:
                status = 200

            record = {
                "path": split.path,
                "webhook_id": msg_id,
                "timestamp": headers.get("webhook-timestamp"),
                "signature": headers.get("webhook-signature"),
                "verified": bool(verified_with),
                "verified_with": verified_with,
                "body": body,
                "answered": status,
            }
            with lock:
                records.append(record)
                out.write(json.dumps(record) + "\n")

            if "delay_ms" in query:
                time.sleep(int(query["delay_ms"]) / 1000)
            if status == 307:
                self.answer(307, headers=[("Location", "/ok")])
            elif status >= 400:
                self.answer(status, b"receiver says no", [("Content-Type", "text/plain")])
            else:
                self.answer(status, b"ok", [("Content-Type", "text/plain")])

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256

        def handle_error(self, request, client_address):
            # A sender that was killed (the crash test) hangs up mid-answer.
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", args.port), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
