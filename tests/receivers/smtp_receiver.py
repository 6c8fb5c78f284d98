#!/usr/bin/env python3
"""A real SMTP server (aiosmtpd) for the delivery tests.

Records every accepted or refused message as one JSON line: {message_id, to,
rcpt_tos, mail_from, subject, body, html, content_type, parts, answered}:
`body` is the text/plain part, `html` the text/html part (or null),
`content_type` the message's own, `parts` the content types of its leaves. With --fail-first N, the first
N deliveries of each Message-ID get a transient 451, so the sender retries.

Prints "listening on PORT" once bound (port 0 picks a free one).
"""

import argparse
import asyncio
import email
import email.policy
import json
from collections import defaultdict

from aiosmtpd.smtp import SMTP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", required=True, help="JSON-lines file to append records to")
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args()

    out = open(args.record, "a", buffering=1)
    seen = defaultdict(int)

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            message = email.message_from_bytes(envelope.content, policy=email.policy.default)
            message_id = message.get("Message-ID")
            seen[message_id] += 1
            answer = "451 4.3.0 try again later" if seen[message_id] <= args.fail_first else "250 OK"
            body = message.get_body(preferencelist=("plain",))
            html = message.get_body(preferencelist=("html",))
            out.write(json.dumps({
                "message_id": message_id,
                "to": message.get("To"),
                "rcpt_tos": list(envelope.rcpt_tos),
                "mail_from": envelope.mail_from,
                "subject": message.get("Subject"),
                "list_unsubscribe": message.get("List-Unsubscribe"),
                "list_unsubscribe_post": message.get("List-Unsubscribe-Post"),
                "list_id": message.get("List-Id"),
                "body": body.get_content() if body is not None else None,
                "html": html.get_content() if html is not None else None,
                "content_type": message.get_content_type(),
                "parts": [part.get_content_type() for part in message.walk() if not part.is_multipart()],
                "answered": answer,
            }) + "\n")
            return answer

    async def serve():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: SMTP(Handler()), "127.0.0.1", args.port)
        port = server.sockets[0].getsockname()[1]
        print(f"listening on {port}", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
