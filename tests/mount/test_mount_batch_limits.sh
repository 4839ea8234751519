#!/usr/bin/env bash
# test_mount_batch_limits.sh - what an ordinary reader's batch handles
# may hold on an allow_other mount (docs/security.md, matfs(8) LIMITS):
# a batch counts one shard handle for each shard it draws on (each may
# hold a descriptor), so `nobody` holding batches of many shards gets
# EMFILE at its quarter of the daemon's descriptors, and root's reads of
# shards and batches go on; plans of huge shuffled batches count against
# MFS_PLAN_BYTES_CAP (ENOMEM past it), the daemon's memory stays
# bounded, and root's batch opens go on; batches planned ahead (no
# reader's) hold no descriptors past the daemon's kept readers.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
command -v setpriv >/dev/null || { echo "skip: no setpriv"; exit 77; }

chmod 711 "$tmp"
mkdir -p "$tmp/pipes" "$tmp/one" "$tmp/big"
# 64 inputs of one 16-byte record; one input of 2^19 8-byte records
"$py" - "$tmp" <<'PY'
import os, struct, sys
t = sys.argv[1]
for i in range(64):
    open(os.path.join(t, "one", "f%02d.bin" % i), "wb").write(struct.pack("<qq", i, 0))
open(os.path.join(t, "big", "all.bin"), "wb").write(
    b"".join(struct.pack("<q", i) for i in range(1 << 19)))
PY
chmod -R a+rX "$tmp/one" "$tmp/big"
printf 'name: one\ninputs: ../one/*.bin\nstages:\n  - exec: [cat]\nrecords: 16\n' \
  >"$tmp/pipes/one.yaml"
printf 'name: big\ninputs: ../big/*.bin\nshards: 1\nstages:\n  - exec: [cat]\nrecords: 8\n' \
  >"$tmp/pipes/big.yaml"
mnt=$tmp/mnt
# 256 descriptors: a reader's bound is 64 shard handles
launch=(prlimit --nofile=256:256)
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o allow_other,workers=2
wait_for 10 test -L "$mnt/one" || fail "no one name"
wait_for 10 test -L "$mnt/big" || fail "no big name"
cat "$mnt/one"/shard-* "$mnt/big"/shard-* >/dev/null || fail "materialize"

mkdir -m 777 "$tmp/sig"
setpriv --reuid=65534 --regid=65534 --clear-groups "$py" - "$mnt" "$tmp/sig" <<'PY' &
import errno, os, sys, time
mnt, sig = sys.argv[1:]
def done(text):
    open(os.path.join(sig, "out"), "w").write(text)
    time.sleep(300)  # held while root reads; killed then
try:
    # seed-none, B=40: batch 0 draws on 40 shards (40 handles' worth)
    held = [open(os.path.join(mnt, "one/batches/40/seed-none/epoch-0/batch-000000"), "rb")]
    try:
        held.append(open(os.path.join(mnt, "one/batches/40/seed-none/epoch-1/batch-000000"), "rb"))
        done("a second batch of 40 shards opened within 64 handles")
    except OSError as e:
        if e.errno != errno.EMFILE:
            done("not EMFILE: %r" % e)
    # one of 8 shards still fits
    held.append(open(os.path.join(mnt, "one/batches/8/seed-1/epoch-0/batch-000000"), "rb"))
    assert len(held[-1].read()) == 8 * 16
    # huge shuffled plans: ENOMEM past the plan bytes bound
    n = 0
    try:
        while n < 64:
            held.append(open(os.path.join(
                mnt, "big/batches/524288/seed-%d/epoch-0/batch-000000" % n), "rb"))
            n += 1
    except OSError as e:
        if e.errno != errno.ENOMEM:
            done("not ENOMEM: %r" % e)
    done("ok %d" % n)
except Exception as e:
    done("error %r" % e)
PY
holder=$!
daemons+=("$holder")
wait_for 120 test -s "$tmp/sig/out" || fail "nobody's opens did not finish"
out=$(cat "$tmp/sig/out")
[[ $out == ok* ]] || fail "nobody: $out"
n=${out#ok }
[ "$n" -ge 4 ] && [ "$n" -lt 64 ] || fail "nobody held $n huge plans (bound: 256 MiB)"
# root's reads go on while nobody holds all that
cmp -s <(cat "$mnt/one/shard-00005") <(head -c 16 "$tmp/one/f05.bin") || fail "root's shard read"
[ "$(wc -c <"$mnt/one/batches/64/seed-2/epoch-0/batch-000000")" = 1024 ] || fail "root's batch read"
[ "$(wc -c <"$mnt/big/batches/524288/seed-99/epoch-0/batch-000000")" = 4194304 ] ||
  fail "root's huge batch read"
rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$mpid/status")
[ "$rss" -lt $((900 * 1024)) ] || fail "the daemon's RSS is $rss kB with nobody's plans held"
kill "$holder"
wait "$holder" 2>/dev/null
pass "nobody's batch handles are bounded: descriptors (EMFILE, then $n plans to ENOMEM); root reads on"
umount_fs "$mnt" "$mpid"

# Batches planned ahead are no reader's: opening and closing batches of
# many views leaves the daemon holding no more than its kept readers
# (512) of a snapshot of more shards than that, whose batches draw on
# all of them
mkdir -p "$tmp/many"
"$py" - "$tmp/many" <<'PY'
import os, struct, sys
for i in range(600):
    open(os.path.join(sys.argv[1], "f%03d.bin" % i), "wb").write(struct.pack("<qq", i, 0))
PY
chmod -R a+rX "$tmp/many"
printf 'name: many\ninputs: ../many/*.bin\nstages:\n  - exec: [cat]\nrecords: 16\n' \
  >"$tmp/pipes/many.yaml"
launch=()
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o allow_other,workers=2
wait_for 10 test -L "$mnt/many" || fail "no many name"
"$matctl" --store "$tmp/store" warm many -j 2 >/dev/null 2>&1 || fail "warm many"
setpriv --reuid=65534 --regid=65534 --clear-groups "$py" - "$mnt/many/batches/600" <<'PY' ||
import os, sys
for s in range(32):
    with open(os.path.join(sys.argv[1], "seed-%d/epoch-0/batch-000000" % s), "rb") as f:
        assert len(f.read()) == 600 * 16
PY
  fail "nobody's batch reads"
sleep 1
fds=$(ls "/proc/$mpid/fd" | wc -l)
[ "$fds" -lt 700 ] || fail "the daemon holds $fds descriptors with no batch open"
pass "batches planned ahead hold no descriptors past the kept readers ($fds open)"
umount_fs "$mnt" "$mpid"
