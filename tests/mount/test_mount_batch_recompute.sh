#!/usr/bin/env bash
# test_mount_batch_recompute.sh - a batch file read again after its
# shards were computed again holds the new computations' bytes only,
# never the kernel's pages of the old ones (a batch's inode is its
# name's, whatever computations it is read from): after `rm SNAP/shard-*`
# and after `matctl rm`, with part of the batch in the page cache; a
# handle open across the recomputation keeps reading the old bytes whole
# (read and mmap), a new open beside it is ESTALE, and once it is closed
# a new open reads the new ones.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$tmp/pipes" "$tmp/data"
"$py" - "$tmp/data" <<'PY'
import os, sys
for i in range(4):
    with open(os.path.join(sys.argv[1], "f%d.bin" % i), "wb") as f:
        for r in range(512):
            f.write(("file %d rec %04d " % (i, r)).encode().ljust(4096, b"."))
PY
# the stage stamps each record with the number of its computation
cat >"$tmp/pipes/stamp.py" <<'EOF2'
import sys
with open(sys.argv[1], "a+") as f:
    f.write("x\n")
    f.seek(0)
    g = len(f.read().splitlines())
d = sys.stdin.buffer.read()
t = str(g).encode().rjust(6)
sys.stdout.buffer.write(b"".join(t + d[i + 6:i + 4096] for i in range(0, len(d), 4096)))
EOF2
cat >"$tmp/pipes/rec.yaml" <<EOF2
name: rec
inputs: ../data/*.bin
shards: 4
stages:
  - exec: [$py, stamp.py, $tmp/calls]
records: 4096
EOF2
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o workers=2
wait_for 10 test -L "$mnt/rec" || fail "no rec name"

"$py" - "$mnt/rec" "$matctl" "$tmp/store" <<'PY' || fail "a batch read across a recomputation"
import collections, glob, os, subprocess, sys, time
snap, matctl, store = sys.argv[1:]
b = os.path.join(snap, "batches/1024/seed-1/epoch-0/batch-000000")

def gens(buf):
    return set(buf[i:i + 6].strip() for i in range(0, len(buf), 4096))

def part(path):
    # 16 KiB of the batch into the page cache, and no more
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    data = os.pread(fd, 4 * 4096, 0)
    os.close(fd)
    return data

old = gens(part(b))
assert old and old <= {b"1", b"2", b"3", b"4"}, old
for how in ("rm", "matctl"):
    if how == "rm":
        for s in glob.glob(os.path.join(snap, "shard-*")):
            os.unlink(s)  # expired: the next open computes them again
    else:
        subprocess.run([matctl, "--store", store, "rm", "rec"], check=True,
                       stdout=subprocess.DEVNULL)
    time.sleep(1.2)  # past the daemon's re-read of the catalog
    with open(b, "rb") as f:
        whole = f.read()
    now = gens(whole)
    assert len(whole) == 1024 * 4096
    assert not now & old, "%s: the old computations %r in a new read" % (
        how, now & old)
    part(b)
    old = now
print("no old page after rm or matctl rm")

# a handle open across a recomputation: its own bytes to the end; a new
# open meanwhile is ESTALE (the two would share the inode's pages, a
# MAP_PRIVATE mapping of the new one too), and once it is closed a new
# open reads the new bytes
import errno, mmap
held = open(b, "rb")
head = held.read(4096)
for s in glob.glob(os.path.join(snap, "shard-*")):
    os.unlink(s)
time.sleep(1.2)
try:
    open(b, "rb")
except OSError as e:
    assert e.errno == errno.ESTALE, e
else:
    raise AssertionError("a new open beside a handle of other computations")
rest = held.read()
m = mmap.mmap(held.fileno(), 0, mmap.MAP_PRIVATE)
mapped = m[:]
m.close()
held.close()
assert gens(head + rest) <= old and gens(mapped) <= old, "the held handle read new bytes"
with open(b, "rb") as f:
    fresh = f.read()
assert fresh and not gens(fresh) & old, "a new open read the held handle's bytes"
with open(b, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, mmap.MAP_PRIVATE)
    assert not gens(m[:]) & old, "the old bytes came back in a mapping"
    m.close()
print("a held handle reads its own bytes; a new open beside it is ESTALE, then reads the new ones")
PY
pass "a batch read after its shards were computed again has no old byte"
umount_fs "$mnt" "$mpid"
