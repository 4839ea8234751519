#!/usr/bin/env python3
"""order_ref.py - batch order 1 reimplemented from docs/format.md, section
"Batch order" (it uses nothing of order/), checked against the test
vectors: python3 order_ref.py tests/order/golden/order-v1.txt.

It reads each case's inputs, computes the epoch key, the shard order, the
windows and the sequence, and compares every line with the file's. Exit 0
when all agree, 1 naming the first line that differs.

Not for: speed; it builds whole lists, which order/ never does.
"""
import hashlib
import sys

M64 = (1 << 64) - 1
ROUNDS = 6
GROUP = 8


def mix(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return z


def round_keys(key, d, a, b):
    keys = []
    for r in range(ROUNDS):
        msg = key + bytes([d]) + a.to_bytes(8, "little") + \
            b.to_bytes(8, "little") + bytes([r])
        keys.append(int.from_bytes(hashlib.sha256(msg).digest()[:8], "little"))
    return keys


def permute(keys, n, x):
    if n < 2:
        return x
    h = ((n - 1).bit_length() + 1) // 2
    mask = (1 << h) - 1
    while True:
        left, right = x >> h, x & mask
        for k in keys:
            left, right = right, left ^ (mix(k ^ right) & mask)
        x = (left << h) | right
        if x < n:
            return x


def order(fp, shuffled, seed, epoch, window, records, nbytes):
    """The key, the shard order, and [(group, part, first, [(s, r)...])]."""
    n = len(records)
    key = None
    if shuffled:
        key = hashlib.sha256(b"matfs-order-1" + fp + seed.to_bytes(8, "little")
                             + epoch.to_bytes(8, "little")).digest()
        sk = round_keys(key, 1, 0, 0)
        shard_order = [permute(sk, n, p) for p in range(n)]
    else:
        shard_order = list(range(n))
    groups, first, acc = [], 0, 0
    for p in range(n):
        acc += nbytes[shard_order[p]]
        size = p + 1 - first
        if (p == n - 1 or not shuffled or
                (size >= GROUP and acc >= window and n - (p + 1) >= GROUP)):
            groups.append((shard_order[first:p + 1], acc))
            first, acc = p + 1, 0
    windows, place = [], 0
    for j, (shards, total) in enumerate(groups):
        m = max(1, -(-total // window)) if shuffled else 1
        for t in range(m):
            elems = []
            for s in shards:
                elems += [(s, r) for r in range(t * records[s] // m,
                                                (t + 1) * records[s] // m)]
            if not elems:
                continue
            qk = round_keys(key, 2, j, t) if shuffled else None
            seq = [elems[permute(qk, len(elems), q) if shuffled else q]
                   for q in range(len(elems))]
            windows.append((j, t, place, seq))
            place += len(seq)
    return key, shard_order, windows


def render(name, fp, shuffled, seed, epoch, window, records, nbytes):
    key, shard_order, windows = order(fp, shuffled, seed, epoch, window,
                                      records, nbytes)
    out = ["case " + name, "fingerprint " + fp.hex()]
    out += (["seed %d" % seed, "epoch %d" % epoch] if shuffled
            else ["seed none"])
    out += ["window %d" % window, "shards %d" % len(records),
            "records " + " ".join(map(str, records)),
            "bytes " + " ".join(map(str, nbytes))]
    if shuffled:
        out.append("key " + key.hex())
    out.append("shard_order " + " ".join(map(str, shard_order)))
    for j, t, first, seq in windows:
        out.append("window group %d part %d first %d count %d"
                   % (j, t, first, len(seq)))
        out.append("order " + " ".join("%d:%d" % e for e in seq))
    out.append("end")
    return out


def main(path):
    lines = open(path).read().splitlines()
    want = [lines[0]]
    i = 1
    while i < len(lines):
        f = {}
        j = i
        while not lines[j].startswith("shard_order"):
            k, _, v = lines[j].partition(" ")
            f[k] = v
            j += 1
        while lines[j] != "end":
            j += 1
        shuffled = f["seed"] != "none"
        want += render(f["case"], bytes.fromhex(f["fingerprint"]), shuffled,
                       int(f["seed"]) if shuffled else 0,
                       int(f.get("epoch", "0")), int(f["window"]),
                       [int(x) for x in f["records"].split()],
                       [int(x) for x in f["bytes"].split()])
        i = j + 1
    for no, (a, b) in enumerate(zip(lines, want), 1):
        if a != b:
            print("%s:%d: expected: %s\n got: %s" % (path, no, a, b))
            return 1
    if len(lines) != len(want):
        print("%s: %d lines, the reimplementation gave %d"
              % (path, len(lines), len(want)))
        return 1
    print("%s: %d lines agree" % (path, len(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
