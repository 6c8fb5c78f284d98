#!/usr/bin/env python3
"""Samples every `tidings worker` process's CPU (utime + stime from
/proc/<pid>/stat) every 50 ms until killed (SIGTERM/SIGINT), then writes one
JSON line per process to the file named by its argument: pid, exe, start
(clock ticks since boot), the last sampled CPU seconds, and the seconds it
was seen alive. The CPU per delivery figures of bench/findings/drain.md, "The
send path per endpoint and batch (landed)", sum the processes of one drain
(same exe, started together)."""
import json, os, signal, sys, time

TICK = os.sysconf("SC_CLK_TCK")
seen = {}
stop = False

def on_signal(*_):
    global stop
    stop = True

signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
out = open(sys.argv[1], "w")
while not stop:
    now = time.time()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if len(cmd) < 2 or cmd[1] != b"worker" or b"tidings" not in os.path.basename(cmd[0]):
                continue
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        start = int(fields[19])
        rec = seen.setdefault((pid, start), {"pid": int(pid), "exe": cmd[0].decode(), "start": start, "first": now})
        rec["cpu"] = cpu
        rec["last"] = now
    time.sleep(0.05)
for rec in seen.values():
    rec["alive"] = rec["last"] - rec["first"]
    out.write(json.dumps(rec) + "\n")
out.close()
