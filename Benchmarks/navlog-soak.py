#!/usr/bin/env python3
"""Memory under churn: three navlog-sync hosts on loopback (static peers, no DNS-SD), each typing
about ten edits a second, host c frozen (SIGSTOP) 3 s every 20 s and host b killed (SIGKILL) and
restarted every 45 s, for --seconds. Prints host a's resident memory every --sample seconds, the
entries it holds, and how much its memory grew in the run's second half against its first
(docs: Benchmarks/README.md, "Memory under churn").

    swift build -c release --product navlog-sync
    Benchmarks/navlog-soak.py --binary .build/release/navlog-sync [--seconds 1800] [--json PATH]

Only the processes it starts are signalled, by PID; its scratch directory is removed at the end.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--binary", default=".build/release/navlog-sync")
parser.add_argument("--seconds", type=int, default=240)
parser.add_argument("--edits-per-second", type=float, default=10)
parser.add_argument("--sample", type=int, default=10, help="seconds between memory samples")
parser.add_argument("--freeze-every", type=int, default=20)
parser.add_argument("--freeze-for", type=int, default=3)
parser.add_argument("--kill-every", type=int, default=45)
parser.add_argument("--base-port", type=int, default=47301)
parser.add_argument("--json", help="write the samples and the summary here")
options = parser.parse_args()

scratch = tempfile.mkdtemp(prefix="navlog-soak-")
names = ["a", "b", "c"]
ports = {name: options.base_port + index for index, name in enumerate(names)}
key = os.path.join(scratch, "group.key")
subprocess.run([options.binary, "keygen", "--out", key], check=True, stdout=subprocess.DEVNULL)


class Host:
    """One navlog-sync process: its stdin for commands, its stdout drained (the entries it
    applied counted by id, across its restarts)."""

    def __init__(self, name):
        self.name = name
        self.process = None
        self.ids = set()
        self.lock = threading.Lock()

    @property
    def entries(self):
        return len(self.ids)

    def start(self):
        peers = sum((["--peer", f"127.0.0.1:{ports[other]}"] for other in names if other != self.name), [])
        self.process = subprocess.Popen(
            [options.binary, "run", "--name", self.name, "--data", os.path.join(scratch, f"{self.name}.db"), "--psk-file", key,
             "--port", str(ports[self.name]), "--json"] + peers,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        threading.Thread(target=self.drain, args=(self.process,), daemon=True).start()

    def drain(self, process):
        for line in process.stdout:
            if '"event":"entry_applied"' in line:
                try:
                    self.ids.add(json.loads(line)["id"])
                except ValueError:
                    pass

    def send(self, line):
        with self.lock:
            try:
                self.process.stdin.write(line + "\n")
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # (killed a moment ago: it is restarted soon)

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def rss_kib(self):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


hosts = {name: Host(name) for name in names}
samples = []
try:
    for host in hosts.values():
        host.start()
    time.sleep(2)
    start = time.monotonic()
    counter = 0
    next_sample = 0
    frozen_until = None
    next_freeze = options.freeze_every
    next_kill = options.kill_every
    interval = 1 / options.edits_per_second
    while (elapsed := time.monotonic() - start) < options.seconds:
        counter += 1
        for name, host in hosts.items():
            if name == "c" and frozen_until is not None:
                continue  # (a frozen host types nothing: its user waits too)
            host.send(f"add leg={counter % 90 + 1} waypoint={name.upper()}{counter} fuel={counter % 20000}")
        if frozen_until is None and elapsed >= next_freeze:
            hosts["c"].process.send_signal(signal.SIGSTOP)
            frozen_until = elapsed + options.freeze_for
            next_freeze += options.freeze_every
        elif frozen_until is not None and elapsed >= frozen_until:
            hosts["c"].process.send_signal(signal.SIGCONT)
            frozen_until = None
        if elapsed >= next_kill:
            hosts["b"].kill()
            hosts["b"].start()
            next_kill += options.kill_every
        if elapsed >= next_sample:
            samples.append({"seconds": round(elapsed), "rssKiB": hosts["a"].rss_kib(), "entries": hosts["a"].entries})
            print(f"{round(elapsed):6d} s  host a {samples[-1]['rssKiB'] / 1024:7.1f} MiB  {samples[-1]['entries']} entries", flush=True)
            next_sample += options.sample
        time.sleep(interval)
    if frozen_until is not None:
        hosts["c"].process.send_signal(signal.SIGCONT)
    time.sleep(2)
    samples.append({"seconds": options.seconds, "rssKiB": hosts["a"].rss_kib(), "entries": hosts["a"].entries})
finally:
    for host in hosts.values():
        if host.process and host.process.poll() is None:
            host.process.send_signal(signal.SIGCONT)
            host.kill()
    shutil.rmtree(scratch, ignore_errors=True)

# Growth in each half, and per thousand entries taken in over it: a level memory grows in its
# second half no more than the entries taken in then account for.
half = options.seconds / 2
first = [s for s in samples if s["seconds"] <= half]
second = [s for s in samples if s["seconds"] >= half]
def growth(part):
    return (part[-1]["rssKiB"] - part[0]["rssKiB"]) / 1024, part[-1]["entries"] - part[0]["entries"]
(first_mib, first_entries), (second_mib, second_entries) = growth(first), growth(second)
summary = {
    "seconds": options.seconds, "startMiB": samples[0]["rssKiB"] / 1024, "endMiB": samples[-1]["rssKiB"] / 1024,
    "entries": samples[-1]["entries"], "firstHalfGrowthMiB": first_mib, "firstHalfEntries": first_entries,
    "secondHalfGrowthMiB": second_mib, "secondHalfEntries": second_entries,
}
print(f"host a: {summary['startMiB']:.1f} -> {summary['endMiB']:.1f} MiB over {options.seconds} s, {summary['entries']} entries; "
      f"first half +{first_mib:.1f} MiB ({first_entries} entries), second half +{second_mib:.1f} MiB ({second_entries} entries)")
if options.json:
    with open(options.json, "w") as out:
        json.dump({"samples": samples, "summary": summary}, out, indent=2)
