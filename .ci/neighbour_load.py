#!/usr/bin/env python3
"""Run a command beside a noisy neighbour: one core of memory traffic, in bursts.

    python3 .ci/neighbour_load.py [--duty 0.75] [--seed 0] [--processes 1] -- make test
    python3 .ci/neighbour_load.py --seconds 60            # just the load, for a minute

The other pytest worker of ``make test`` (and a reader's browser, a second
notebook, another session on a shared machine) takes one core in bursts and
streams memory while it does: the two cores share the memory bus and the
last-level cache, so every timed check beside it reads slower and noisier.
This tool is that neighbour, on demand and repeatable: one process copies a
buffer far larger than any cache (``dst[:] = src`` on bytearrays, a memcpy) for
a burst, sleeps, and again, with burst and pause lengths drawn at random around
``--burst`` seconds so that they fall at every phase of what is being timed.

A timed check that passes on a quiet machine must pass under it too; a planted
regression must still fail under it. It needs nothing but Python's standard
library, so it runs before ``make`` has built the virtual environment. It stops
with the command (or after ``--seconds``) and prints how much it copied.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time

MIB = 2**20


def load(stop_at: float, duty: float, burst_s: float, buffer_mib: int, seed: int, done) -> None:
    """Copy a ``buffer_mib`` buffer in bursts until ``stop_at`` (or ``done`` is set); report GiB
    copied."""
    rng = random.Random(seed)
    src, dst = bytearray(os.urandom(MIB)) * buffer_mib, bytearray(buffer_mib * MIB)
    copied, busy = 0, 0.0
    while not done.is_set() and time.monotonic() < stop_at:
        burst = rng.uniform(0.25, 1.75) * burst_s
        pause = burst * (1 - duty) / duty * rng.uniform(0.25, 1.75)
        start = time.monotonic()
        while time.monotonic() - start < burst and not done.is_set():
            dst[:] = src
            copied += len(src)
        busy += time.monotonic() - start
        done.wait(pause)
    print(
        f"neighbour load: copied {copied / 2**30:,.0f} GiB in bursts, busy {busy:.0f} s",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="neighbour_load.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duty", type=float, default=0.75, help="share of the time the core is busy (0.75)"
    )
    parser.add_argument(
        "--burst", type=float, default=1.0, help="mean burst length in seconds (1.0)"
    )
    parser.add_argument(
        "--buffer-mib", type=int, default=256, help="buffer copied, MiB (256: past any cache)"
    )
    parser.add_argument("--seconds", type=float, default=None, help="stop the load after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--processes", type=int, default=1, help="competing processes, each on its own seed (1)"
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- the command to run beside the load"
    )
    args = parser.parse_args(argv)
    # Ctrl-C stops it even where whoever started it ignores SIGINT (a pytest-xdist worker does, and
    # its children inherit that): a stray load would run on for --seconds.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command and args.seconds is None:
        parser.error("give a command after --, or --seconds")
    if not 0 < args.duty <= 1:
        parser.error("--duty is a share of the time: more than 0, at most 1")
    stop_at = time.monotonic() + (args.seconds if args.seconds is not None else float("inf"))
    if args.processes < 1:
        parser.error("--processes: at least 1")
    done = multiprocessing.Event()
    neighbours = [
        multiprocessing.Process(
            target=load,
            daemon=True,
            args=(stop_at, args.duty, args.burst, args.buffer_mib, args.seed + i, done),
        )
        for i in range(args.processes)
    ]
    for neighbour in neighbours:
        neighbour.start()
    try:
        status = subprocess.call(command) if command else [n.join() for n in neighbours] and 0
    finally:
        done.set()
        for neighbour in neighbours:
            neighbour.join(10)
    return status


if __name__ == "__main__":
    sys.exit(main())
