#!/usr/bin/env python3
"""wake.py - the wake-up latency of bench/cluster/run.sh, per sample.

For shard k of snapshot NAME, mounted through two daemons on one catalog
(A and B): a reader opens it through A, whose stage then waits on the
FIFO GATES/k; once A reads the shard running, a reader opens it through
B, which finds it computed elsewhere and waits. After a random pause
(0.3 to 0.9 s, so that a polling waiter's period is met at any phase)
the gate opens: A's stage ends, A commits, A's open returns, and B's
open returns when B learns of the commit. Prints one line per sample:
"sample K A_TO_B_MS GATE_TO_B_MS", where A_TO_B is from A's open
returning (just after its commit) to B's, and GATE_TO_B from the gate to
B's (the stage's end, storing and the commit included). Each shard is
read back and must be the bytes of its input, or the run stops.

usage: wake.py MOUNT_A MOUNT_B NAME SHARDS GATES INPUTS
Not for: anything but bench/cluster/run.sh, which makes the mounts, the
spec, the FIFOs and the inputs (INPUTS/0000K.txt for shard K).
"""
import os
import random
import sys
import threading
import time


def opener(path, out):
    fd = os.open(path, os.O_RDONLY)
    out["t"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    data = b""
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        data += b
    os.close(fd)
    out["data"] = data


def state(path):
    try:
        return os.getxattr(path, "user.matfs.state").decode()
    except OSError:
        return ""


def sample(mount_a, mount_b, name, k, gates, inputs):
    shard = "%s/shard-%05d" % (name, k)
    a, b = {}, {}
    ta = threading.Thread(target=opener, args=(os.path.join(mount_a, shard), a))
    ta.start()
    deadline = time.monotonic() + 30
    while state(os.path.join(mount_b, shard)) != "running":
        if time.monotonic() > deadline:
            sys.exit("wake.py: shard %d never ran through A" % k)
        time.sleep(0.005)
    tb = threading.Thread(target=opener, args=(os.path.join(mount_b, shard), b))
    tb.start()
    time.sleep(random.uniform(0.3, 0.9))
    t_gate = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    with open(os.path.join(gates, str(k)), "w") as g:
        g.write("go\n")
    ta.join()
    tb.join()
    with open(os.path.join(inputs, "%05d.txt" % k), "rb") as f:
        want = f.read()
    if a.get("data") != want or b.get("data") != want:
        sys.exit("wake.py: shard %d: other bytes than its input" % k)
    print("sample %d %.3f %.3f" % (k, (b["t"] - a["t"]) / 1e6,
                                   (b["t"] - t_gate) / 1e6), flush=True)


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    mount_a, mount_b, name, shards, gates, inputs = sys.argv[1:]
    for k in range(int(shards)):
        sample(mount_a, mount_b, name, k, gates, inputs)


if __name__ == "__main__":
    main()
