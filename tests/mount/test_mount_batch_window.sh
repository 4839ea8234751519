#!/usr/bin/env bash
# test_mount_batch_window.sh - reading an epoch in order, the next
# window's chunks are read ahead while this window's batches are read:
# after batch 0 only, the root's user.matfs.chunks_decompressed reaches
# the chunks of windows 0 and 1 (without the read-ahead it stays at
# window 0's until batch 8 asks for window 1); the whole epoch then reads
# every record once, each chunk decompressed once; with a chunk cache
# too small for two windows, nothing is read ahead and the epoch still
# reads right; the window after next waits for the reader to enter the
# next (two windows held at most, not three).
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$tmp/pipes" "$tmp/data"
# 16 inputs of 256 records of 1 KiB, each record naming its input and number
"$py" - "$tmp/data" <<'PY'
import os, sys
for i in range(16):
    with open(os.path.join(sys.argv[1], "f%02d.bin" % i), "wb") as f:
        for r in range(256):
            f.write(("file %02d rec %04d " % (i, r)).encode().ljust(1024, b"."))
PY
# 16 shards of 4 chunks; windows of 512 KiB: two groups of 8 shards, each
# of 4 windows, each window one chunk of each of its group's shards
cat >"$tmp/pipes/win.yaml" <<'EOF2'
name: win
inputs: ../data/*.bin
shards: 16
chunk_size: 64KiB
compression: zstd:1
records: 1024
shuffle_window: 512KiB
stages:
  - exec: [cat]
EOF2
store=$tmp/store mnt=$tmp/mnt
"$matctl" --store "$store" warm "$tmp/pipes/win.yaml" >/dev/null 2>&1 ||
  fail "matctl warm"
dec() { xattr "$mnt" chunks_decompressed; }
at_least() { [ "$(dec)" -ge "$1" ]; }
# epoch_ok VIEW [PAUSE]: every batch by number until ENOENT: 64 of 64
# records, every record once; PAUSE seconds after each batch, so that the
# read-ahead of a batch's chunks is done before its window's last batch
# lets them go (one still queued then would decompress a chunk again)
epoch_ok() {
  "$py" - "$1" "${2:-0}" <<'PY'
import errno, os, sys, time
seen, n = set(), 0
while True:
    try:
        b = open(os.path.join(sys.argv[1], "batch-%06d" % n), "rb").read()
    except OSError as e:
        assert e.errno == errno.ENOENT, e
        break
    assert len(b) == 64 * 1024, (n, len(b))
    for i in range(0, len(b), 1024):
        seen.add(b[i:i + 17])
    n += 1
    time.sleep(float(sys.argv[2]))
assert n == 64, n
assert len(seen) == 4096, len(seen)
PY
}

mount_fs "$mnt" "$store" "$tmp/pipes"
wait_for 10 test -L "$mnt/win" || fail "win did not register"
view=$mnt/win/batches/64/seed-7/epoch-0/rank-0-of-1
[ "$(dec)" = 0 ] || fail "chunks decompressed at mount: $(dec)"
head -c 1 "$view/batch-000000" >/dev/null || fail "batch 0"
wait_for 20 at_least 16 ||
  fail "after batch 0, $(dec) chunks decompressed, want 16 (windows 0 and 1)"
sleep 0.5 # nothing beyond window 1 is read ahead yet
[ "$(dec)" -le 16 ] || fail "after batch 0, $(dec) chunks decompressed, want 16"
pass "after batch 0: windows 0 and 1 read ahead ($(dec) chunks)"
epoch_ok "$view" 0.02 || fail "epoch 0"
[ "$(dec)" = 64 ] || fail "epoch 0 decompressed $(dec) chunks, want each of 64 once"
pass "epoch 0: every record once, each chunk decompressed once"
umount_fs "$mnt" "$mpid"

# a cache of 640 KiB holds one window's chunks (512 KiB) and its margin
# (an eighth), no more
mount_fs "$mnt" "$store" "$tmp/pipes" -o cache=640KiB
wait_for 10 test -L "$mnt/win" || fail "win did not register"
head -c 1 "$view/batch-000000" >/dev/null || fail "batch 0, small cache"
sleep 1
[ "$(dec)" -le 8 ] || fail "small cache: $(dec) chunks decompressed after batch 0, want window 0's 8"
epoch_ok "$view" || fail "epoch 0, small cache"
pass "a cache too small for two windows: nothing read ahead, the epoch reads right"
umount_fs "$mnt" "$mpid"

# a fresh mount, another view
mount_fs "$mnt" "$store" "$tmp/pipes"
wait_for 10 test -L "$mnt/win" || fail "win did not register"
view=$mnt/win/batches/64/seed-9/epoch-0/rank-0-of-1
head -c 1 "$view/batch-000000" >/dev/null || fail "batch 0, seed 9"
wait_for 20 at_least 16 || fail "seed 9: after batch 0, $(dec) chunks decompressed, want 16"
# up to batch 6, the reader is still in window 0 (batches 0 to 7): the
# batches planned ahead of it (7 and 8) reach into window 1, but window 2
# waits for the reader, so that no more than two windows are held
"$py" - "$view" <<'PY' || fail "batches 1 to 6"
import os, sys
for n in range(1, 7):
    assert len(open(os.path.join(sys.argv[1], "batch-%06d" % n), "rb").read()) == 64 * 1024
PY
sleep 0.5
[ "$(dec)" -le 16 ] ||
  fail "in window 0, $(dec) chunks decompressed, want 16 (window 2 read ahead before its reader reached window 1)"
"$py" -c 'import sys; open(sys.argv[1] + "/batch-000007", "rb").read(); open(sys.argv[1] + "/batch-000008", "rb").read()' "$view" ||
  fail "batches 7 and 8"
wait_for 20 at_least 24 ||
  fail "in window 1, $(dec) chunks decompressed, want 24 (window 2 read ahead)"
pass "window 2 is read ahead once the reader is in window 1, not before"
umount_fs "$mnt" "$mpid"
