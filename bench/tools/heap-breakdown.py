#!/usr/bin/env python3
"""Where an open stream's heap goes: the peak heap of a `tidings serve`
profiled by heaptrack, by what holds it, divided by the streams it held.

    heaptrack_print -f PROFILE.zst -p 0 -a 0 -T 0 \\
        --flamegraph-cost-type peak -F peak.folded
    bench/tools/heap-breakdown.py peak.folded STREAMS

The peak is the whole process's, so its baseline (the OpenAPI document,
caches, pools) is divided too: it shows under "other". How to take the
profile: bench/findings/stream.md, "Where a stream's memory goes".
"""

import collections
import sys

# (what, does this folded stack belong to it), first match wins.
HOLDERS = [
    ("hyper: the response's write buffer",
     lambda s: "new<> (io.rs);new<> (io.rs);new<> (conn.rs);serve_connection" in s),
    ("hyper: a read buffer held while the response streams",
     lambda s: "poll_read_from_io" in s and "mid_message_detect_eof" in s),
    ("hyper: the request head's read buffer",
     lambda s: "poll_read_from_io" in s and "poll_read_head" in s),
    ("poem: the ReaderStream buffer of an SSE body",
     lambda s: "reader_stream.rs" in s),
    ("hyper: the dispatcher's boxed request future",
     lambda s: "serve_connection" in s and "pin<> (boxed.rs)" in s),
    ("tokio: the connection's task",
     lambda s: "join_set.rs" in s and "listener.rs" in s),
    ("hub: the stream's channel (its first block)",
     lambda s: "register (hub.rs)" in s and "channel" in s),
    ("hub: routing maps", lambda s: "hub.rs" in s),
    ("stream: the live feed (its state and future)",
     lambda s: "stream.rs" in s and "pin<> (boxed.rs)" in s and "mod.rs" in s),
    ("poem: endpoint futures and the response",
     lambda s: "endpoint.rs" in s or "event_stream.rs" in s or "response.rs" in s),
    ("tokio: the socket's registration",
     lambda s: "registration.rs" in s or "poll_evented" in s),
]


def main(path: str, streams: int) -> None:
    held = collections.Counter()
    total = 0
    for line in open(path):
        stack, _, cost = line.rstrip("\n").rpartition(" ")
        bytes_ = int(cost)
        total += bytes_
        holder = next((name for name, holds in HOLDERS if holds(stack)), "other (with the baseline)")
        held[holder] += bytes_
    kib = lambda b: b / streams / 1024
    print(f"peak heap {total / 1e6:.1f} MB: {kib(total):.1f} KiB per stream ({streams})")
    for name, _ in HOLDERS + [("other (with the baseline)", None)]:
        print(f"{kib(held[name]):6.2f} KiB  {name}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
