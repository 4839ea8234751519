#!/usr/bin/env bash
# test_mount_batch_mapped.sh - batches of a snapshot stored raw (codec
# none) are read out of mappings of its shard files: every record of an
# epoch once, each byte right; a chunk damaged in the store before the
# mount is found (EIO, never wrong bytes) and healed by the next read;
# a shard file cut short while its chunks are mapped and being read
# fails those reads with EIO (the daemon goes on: no SIGBUS), and the
# next reads heal it.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$tmp/pipes/data"
# 4 inputs of 1024 records of 1 KiB, each naming its input and number
"$py" - "$tmp/pipes/data" <<'PY'
import os, sys
for i in range(4):
    with open(os.path.join(sys.argv[1], "f%02d.bin" % i), "wb") as f:
        for r in range(1024):
            f.write(("file %02d rec %04d " % (i, r)).encode().ljust(1024, b"%c" % (65 + (r % 26))))
PY
# 4 shards of 4 chunks of 256 KiB (smaller ones are not mapped), one
# window of all of them
cat >"$tmp/pipes/raw.yaml" <<'EOF2'
name: raw
inputs: data/*.bin
shards: 4
chunk_size: 256KiB
compression: none
records: 1024
shuffle_window: 8MiB
stages:
  - exec: [/bin/sh, -c, 'echo x >> ../calls; cat']
EOF2
store=$tmp/store mnt=$tmp/mnt
"$matctl" --store "$store" warm "$tmp/pipes/raw.yaml" >/dev/null 2>&1 ||
  fail "matctl warm"
# epoch VIEW MODE: every batch by number until ENOENT. Each record read
# must be the one its first 17 bytes name, whole. MODE strict: 64 batches
# of 64 records, every record once; MODE errors: a batch may fail with
# EIO (counted, printed), never with wrong bytes.
epoch() {
  "$py" - "$1" "$2" <<'PY'
import errno, os, sys
view, mode = sys.argv[1], sys.argv[2]
seen, n, eio = set(), 0, 0
while True:
    try:
        b = open(os.path.join(view, "batch-%06d" % n), "rb").read()
    except OSError as e:
        if e.errno == errno.EIO and mode == "errors":
            eio += 1
            n += 1
            continue
        assert e.errno == errno.ENOENT, (n, e)
        break
    assert len(b) == 64 * 1024, (n, len(b))
    for i in range(0, len(b), 1024):
        name = b[i:i + 17]
        r = int(name[12:16])
        exp = (b"file %02d rec %04d " % (int(name[5:7]), r)).ljust(1024, b"%c" % (65 + (r % 26)))
        assert b[i:i + 1024] == exp, (n, i, name)
        assert name not in seen, (n, name)
        seen.add(name)
    n += 1
assert n == 64, n
if mode == "strict":
    assert len(seen) == 4096, len(seen)
print(eio)
PY
}
view=$mnt/raw/batches/64/seed-3/epoch-0/rank-0-of-1

mount_fs "$mnt" "$store" "$tmp/pipes"
wait_for 10 test -L "$mnt/raw" || fail "raw did not register"
fp=$(readlink "$mnt/raw")
[ "$(epoch "$view" strict)" = 0 ] || fail "epoch 0"
pass "an epoch of raw chunks: every record once, each byte right"

shard_file() { # the store file of shard K
  local run
  run=$("$matctl" --store "$store" stat raw --json | "$py" -c \
    'import json,sys; print(json.load(sys.stdin)["shards"][int(sys.argv[1])]["run_id"])' "$1")
  echo "$store/snapshots/$fp/$run/shard-$(printf %05d "$1").mfs"
}
umount_fs "$mnt" "$mpid"

# a byte flipped in a chunk of shard 1 (its third chunk: the chunks of
# codec none follow a 16-byte header)
f=$(shard_file 1)
[ -f "$f" ] || fail "no store file for shard 1"
printf '\x5a' | dd of="$f" bs=1 seek=$((16 + 2 * 262144 + 100)) conv=notrunc status=none
mount_fs "$mnt" "$store" "$tmp/pipes"
wait_for 10 test -L "$mnt/raw" || fail "raw did not register"
eio=$(epoch "$view" errors) || fail "a flipped byte: wrong bytes or a wrong error"
[ "$eio" -gt 0 ] || fail "a flipped byte went unseen"
# the shard is computed again; batches use the readers they keep for up
# to a second (a catalog re-read) before they see its new computation
healed() {
  local _
  for _ in $(seq 1 20); do
    [ "$(epoch "$view" strict 2>/dev/null)" = 0 ] && return 0
    sleep 0.25
  done
  return 1
}
healed || fail "not healed after the flip"
pass "a flipped byte: $eio batches failed with EIO, none wrong; healed"

# cut short while mapped: batch 0 of a view not read yet (the kernel
# keeps the pages of batches read: those would not come here) maps the
# window's chunks, then shard 2's file loses its second half under them
view=$mnt/raw/batches/64/seed-4/epoch-0/rank-0-of-1
f=$(shard_file 2)
[ -f "$f" ] || fail "no store file for shard 2"
"$py" - "$view" "$f" >"$tmp/cut.out" <<'PY' || fail "cut while mapped: $(cat "$tmp/cut.out")"
import errno, os, sys
view, f = sys.argv[1], sys.argv[2]
b = open(os.path.join(view, "batch-000000"), "rb").read()
assert len(b) == 64 * 1024
os.truncate(f, os.path.getsize(f) // 2)
eio = 0
for n in range(1, 64):
    try:
        b = open(os.path.join(view, "batch-%06d" % n), "rb").read()
    except OSError as e:
        assert e.errno == errno.EIO, (n, e)
        eio += 1
        continue
    assert len(b) == 64 * 1024, (n, len(b))
    for i in range(0, len(b), 1024):
        name = b[i:i + 17]
        r = int(name[12:16])
        exp = (b"file %02d rec %04d " % (int(name[5:7]), r)).ljust(1024, b"%c" % (65 + (r % 26)))
        assert b[i:i + 1024] == exp, (n, i, name)
print(eio)
PY
kill -0 "$mpid" 2>/dev/null || fail "the daemon died when a mapped file was cut short"
is_mounted "$mnt" || fail "the mount is gone"
cut_eio=$(cat "$tmp/cut.out")
[ "$cut_eio" -gt 0 ] || fail "a file cut short under its mappings went unseen"
healed || fail "not healed after the cut"
pass "a file cut short while mapped: $cut_eio batches failed with EIO, the daemon lives, healed"
umount_fs "$mnt" "$mpid"
