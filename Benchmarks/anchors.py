#!/usr/bin/env python3
"""The replicated store's anchors, measured beside StoreBenchmark (issue 60): Yjs's Rust core
through pycrdt and Automerge's Rust core through automerge, each syncing two documents by its
own protocol, in one process (their protocols are byte messages; the bytes are counted, nothing
is sent over a socket), nothing signed, nothing written to disk. The records are StoreBenchmark's
(`Entry`: an id and five fields, about 290 bytes), each a map of its fields under its id.

    Benchmarks/anchors.py [--records 100000] [--differences 1000,10] [--trials 3] [--json PATH]

For each anchor: writing every record (one transaction), a fresh document joining one holding
them all (time, bytes, round trips), then differences written apart (half on each side) between
documents that met before, caught up (time, bytes both ways, round trips). Times are medians of
the trials, with their spread. `make bench` runs it in a virtual environment of its own with
the versions Benchmarks/anchors-requirements.txt pins.
"""

import argparse
import json
import os
import statistics
import time

from automerge import core as am
from pycrdt import Doc, Map


def entry(n, station):
    return {
        "waypoint": f"WPT{n % 10000}",
        "estimated": f"2026-11-29T{10 + n % 12}:{n % 60}:00Z",
        "fuelKilograms": 20000 - n % 20000,
        "altitudeFeet": 35000 + n % 4000,
        "remarks": f"entry {n} of the benchmark log, written by {station}",
    }


class Yjs:
    name = "pycrdt (Yjs's Rust core, yrs)"

    def __init__(self):
        self.doc = Doc()
        self.records = self.doc.get("records", type=Map)

    def write(self, numbers, station):
        with self.doc.transaction():
            for n in numbers:
                self.records[f"{station}-{n}"] = Map(entry(n, station))

    def fork(self):
        other = Yjs()
        other.doc.apply_update(self.doc.get_update())
        return other

    @staticmethod
    def sync(a, b):
        """One round trip: each sends its state vector, each answers with what the other lacks."""
        sa, sb = a.doc.get_state(), b.doc.get_state()
        to_b, to_a = a.doc.get_update(sb), b.doc.get_update(sa)
        b.doc.apply_update(to_b)
        a.doc.apply_update(to_a)
        return 1, len(sa) + len(sb) + len(to_a) + len(to_b)

    def count(self):
        return len(self.records)


class Automerge:
    name = "automerge (Automerge's Rust core)"

    def __init__(self, document=None):
        self.doc = document or am.Document()

    def write(self, numbers, station):
        with self.doc.transaction() as tx:
            for n in numbers:
                record = tx.put_object(am.ROOT, f"{station}-{n}", am.ObjType.Map)
                for key, value in entry(n, station).items():
                    if isinstance(value, int):
                        tx.put(record, key, am.ScalarType.Int, value)
                    else:
                        tx.put(record, key, am.ScalarType.Str, value)

    def fork(self):
        return Automerge(am.Document.load(self.doc.save()))

    @staticmethod
    def sync(a, b):
        """Automerge's sync protocol between two documents until neither has more to say."""
        sa, sb = am.SyncState(), am.SyncState()
        trips, total = 0, 0
        while True:
            to_b = a.doc.generate_sync_message(sa)
            if to_b is not None:
                encoded = to_b.encode()
                total += len(encoded)
                b.doc.receive_sync_message(sb, am.Message.decode(encoded))
            to_a = b.doc.generate_sync_message(sb)
            if to_a is not None:
                encoded = to_a.encode()
                total += len(encoded)
                a.doc.receive_sync_message(sa, am.Message.decode(encoded))
            if to_b is None and to_a is None:
                return trips, total
            trips += 1

    def count(self):
        return self.doc.length(am.ROOT)


def median(values):
    return statistics.median(values), min(values), max(values)


def measure(anchor, records, differences, trials):
    results = {"anchor": anchor.name, "records": records}
    writes, joins, join_bytes, join_trips = [], [], 0, 0
    for _ in range(trials):
        captain = anchor()
        start = time.perf_counter()
        captain.write(range(records), "captain")
        writes.append(time.perf_counter() - start)
        start = time.perf_counter()
        fresh = anchor()
        join_trips, join_bytes = anchor.sync(captain, fresh)
        joins.append(time.perf_counter() - start)
        assert fresh.count() == records, "the fresh document holds every record"
    results["write_seconds"] = median(writes)
    results["join_seconds"] = median(joins)
    results["join_bytes"] = join_bytes
    results["join_round_trips"] = join_trips
    results["differences"] = []
    for count in differences:
        times, total, trips = [], 0, 0
        for _ in range(trials):
            a = anchor()
            a.write(range(records), "captain")
            b = a.fork()
            a.write(range(records, records + count // 2), "captain")
            b.write(range(records, records + count - count // 2), "relief")
            start = time.perf_counter()
            trips, total = anchor.sync(a, b)
            times.append(time.perf_counter() - start)
            assert a.count() == b.count() == records + count, "both hold every record"
        results["differences"].append(
            {"differences": count, "seconds": median(times), "bytes": total, "round_trips": trips}
        )
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100000)
    parser.add_argument("--differences", default="1000,10")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--json", default="bench-results/anchors.json")
    arguments = parser.parse_args()
    differences = [int(d) for d in arguments.differences.split(",") if d]
    everything = []
    for anchor in (Yjs, Automerge):
        r = measure(anchor, arguments.records, differences, arguments.trials)
        everything.append(r)
        print(f"{r['anchor']}, {r['records']} records, medians of {arguments.trials} (min-max):")
        print("  write: %.2f s (%.2f-%.2f), %.0f records/s" % (*r["write_seconds"], r["records"] / r["write_seconds"][0]))
        print(
            "  fresh join: %.2f s (%.2f-%.2f), %d bytes, %d round trips"
            % (*r["join_seconds"], r["join_bytes"], r["join_round_trips"])
        )
        for d in r["differences"]:
            print(
                "  %d differences, met before: %.3f s (%.3f-%.3f), %d bytes both ways, %d round trips"
                % (d["differences"], *d["seconds"], d["bytes"], d["round_trips"])
            )
    os.makedirs(os.path.dirname(arguments.json) or ".", exist_ok=True)
    with open(arguments.json, "w") as out:
        json.dump(everything, out, indent=2)
    print(f"JSON written to {arguments.json}")


if __name__ == "__main__":
    main()
