#!/usr/bin/env python3
"""Names the lock sites LockCounter sampled (MULTIPEER_LOCK_SITES=FILE), busiest first.

    MULTIPEER_LOCK_SITES=/tmp/sites.txt LD_PRELOAD=$PWD/.build/release/liblockcounter.so \\
        .build/release/SessionBenchmark --locks --seconds 2
    python3 Benchmarks/LockCounter/sites.py /tmp/sites.txt [--top 16] [--per N]

Each site is shown as its estimated acquisitions (and, with --per N, per N things: messages, say)
and its first frames, the lock's own wrappers (NIOConcurrencyHelpers) left out, each frame as the
function it is in and the one it was inlined into.
"""
import argparse
import re
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("file")
parser.add_argument("--top", type=int, default=16)
parser.add_argument("--per", type=float, help="divide each count by this (messages, say)")
parser.add_argument("--frames", type=int, default=4)
arguments = parser.parse_args()

text = open(arguments.file).read()
total = int(re.match(r"acquisitions (\d+)", text).group(1))
sites = []
for block in text.split("site ")[1:]:
    lines = block.strip().split("\n")
    sites.append((int(lines[0]), [line.strip() for line in lines[1:]]))
sites.sort(reverse=True)

# binary -> offsets, symbolized in one llvm-symbolizer call per binary
frame = re.compile(r"(.*)\((\+0x[0-9a-f]+)\)")
offsets = {}
for _, frames in sites:
    for line in frames:
        match = frame.match(line)
        if match:
            offsets.setdefault(match.group(1), set()).add(match.group(2)[1:])
functions = {}
for binary, found in offsets.items():
    found = sorted(found)
    output = subprocess.run(
        ["llvm-symbolizer", "--obj=" + binary] + found, capture_output=True, text=True
    ).stdout.strip().split("\n\n")
    for offset, answer in zip(found, output):
        functions[(binary, offset)] = answer.split("\n")[0::2]  # innermost inlined frame first
names = sorted({name for found in functions.values() for name in found})
demangled = subprocess.run(
    ["swift", "demangle", "--simplified", "--compact"], input="\n".join(names), capture_output=True, text=True
).stdout.split("\n")
readable = dict(zip(names, demangled))


def describe(line):
    match = frame.match(line)
    if not match:
        return re.sub(r"\s*\[0x[0-9a-f]+\]$", "", line)
    found = [readable.get(name, name) for name in functions.get((match.group(1), match.group(2)[1:]), [])]
    ours = [name for name in found if "NIOConcurrencyHelpers" not in name and "LockStorage" not in name]
    return " <- ".join(name[:100] for name in (ours or found[-1:])[:2])


print(f"{total} acquisitions in all")
for count, frames in sites[: arguments.top]:
    share = f" ({count / arguments.per:.2f} per)" if arguments.per else ""
    print(f"{count}{share}")
    for line in frames[: arguments.frames]:
        print("    " + describe(line))
