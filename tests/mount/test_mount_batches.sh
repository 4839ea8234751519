#!/usr/bin/env bash
# test_mount_batches.sh - the batch tree on a real mount (DESIGN.md,
# "Batches as files"; docs/format.md §8-9), read with ordinary programs
# and Python's os calls: a cold epoch's batch 0 computes only the shards
# its first group needs; every record of the epoch is in exactly one
# global batch, each batch is B records of the shards' bytes as `matctl
# batches` places them; the sequence is the same for every B and W,
# differs by epoch and seed, and is the same re-read and after a remount;
# ranks list equal counts in whole rounds and hold global batches
# G + R + kW; a job resumed on another world size sees every record once;
# bad names are ENOENT, a snapshot without records has no tree; stat
# computes nothing; folders past the per-user bound are ENFILE until the
# kernel forgets them.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$tmp/pipes" "$tmp/data"
# 16 inputs of 3..18 records of 256 bytes, each record unique
"$py" - "$tmp/data" <<'PY'
import os, sys
for i in range(16):
    with open(os.path.join(sys.argv[1], "f%02d.bin" % i), "wb") as f:
        for r in range(3 + i):
            f.write(("file %02d record %03d " % (i, r)).encode().ljust(256, b"."))
PY
cat >"$tmp/pipes/rec.yaml" <<'EOF2'
name: rec
inputs: ../data/*.bin
shards: 16
stages:
  - exec: [sh, -c, 'echo x >>"$0"; cat', CALLS]
records: 256
shuffle_window: 2KiB
chunk_size: 4KiB
compression: zstd:3
EOF2
sed -i "s|CALLS|$tmp/calls|" "$tmp/pipes/rec.yaml"
cat >"$tmp/pipes/plain.yaml" <<'EOF2'
name: plain
inputs: ../data/f00.bin
shards: 1
stages:
  - exec: [cat]
EOF2
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o workers=2
wait_for 10 test -L "$mnt/rec" || fail "no rec name"
wait_for 10 test -L "$mnt/plain" || fail "no plain name"
fp=$(readlink "$mnt/rec")

# stat of a cold batch computes nothing and says 0; ls lists the shards
# only (the tree is looked up, not listed)
b0=$mnt/rec/batches/4/seed-1/epoch-0/batch-000000
[ "$(stat -c %s "$b0")" = 0 ] || fail "a cold batch's size is not 0"
[ "$(stat -c %F "$mnt/rec/batches/4")" = directory ] || fail "B not a folder"
[ "$(calls "$tmp/calls")" = 0 ] || fail "stat computed"
ls "$mnt/rec/" | grep -q batches && fail "batches listed among the shards"
[ "$(xattr "$b0" order)" = 1 ] || fail "user.matfs.order is not 1"
[ "$(xattr "$mnt/rec" order)" = 1 ] || fail "the snapshot's user.matfs.order is not 1"
[ -z "$(xattr "$mnt/plain" order)" ] || fail "user.matfs.order without records"
pass "stat and ls compute nothing"

# the cold first batch: 256 x 4 bytes, from the first group only
[ "$(wc -c <"$b0")" = 1024 ] || fail "batch 0 is not 1024 bytes"
[ "$(stat -c %s "$b0")" = 1024 ] || fail "batch 0's size after its open"
n=$(calls "$tmp/calls")
[ "$n" -ge 8 ] && [ "$n" -lt 16 ] || fail "batch 0 computed $n shards"
# a listing before every shard is materialized: a known prefix
known=$(ls "$mnt/rec/batches/4/seed-1/epoch-0" | wc -l)
[ "$known" -ge 1 ] || fail "no batch listed once batch 0 opened"
pass "a cold batch 0 computed $n shards of 16 (listing $known batches)"

"$py" - "$mnt" "$matctl" "$tmp/store" "$known" <<'PY' || fail "batch properties"
import collections, errno, json, os, subprocess, sys
mnt, matctl, store, known = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
snap = os.path.join(mnt, "rec")
R = 256
def path(b, seed, epoch, n, rank=None):
    p = os.path.join(snap, "batches", str(b), "seed-%s" % seed, "epoch-%d" % epoch)
    if rank:
        p = os.path.join(p, rank)
    return os.path.join(p, "batch-%06d" % n)
def read_view(b, seed, epoch, rank=None):
    out, n = [], 0
    while True:
        try:
            with open(path(b, seed, epoch, n, rank), "rb") as f:
                d = f.read()
        except OSError as e:
            assert e.errno == errno.ENOENT, e
            return out
        assert len(d) == b * R, (b, n, len(d))
        out.append([d[i * R:(i + 1) * R] for i in range(b)])
        n += 1
assert known <= len(read_view(4, 1, 0)), known
shards = [open(os.path.join(snap, "shard-%05d" % k), "rb").read() for k in range(16)]
records = [s[i * R:(i + 1) * R] for s in shards for i in range(len(s) // R)]
total = len(records)
assert total == sum(3 + i for i in range(16)), total

# every record once in the global batches; the tail is the partial batch
for b in (4, 7):
    seq = [r for batch in read_view(b, 1, 0) for r in batch]
    assert len(seq) == total // b * b, (b, len(seq))
    assert len(set(seq)) == len(seq)
    assert set(seq) <= set(records)
# one sequence for every B: B=1 gives it whole
seq1 = [r for batch in read_view(1, 1, 0) for r in batch]
assert sorted(seq1) == sorted(records)
for b in (4, 7, 13):
    seq = [r for batch in read_view(b, 1, 0) for r in batch]
    assert seq == seq1[:len(seq)], b
# mixed across shards: not shard order, and batch 0 draws on many shards
assert seq1 != records
assert len({r[:7] for r in seq1[:8]}) > 2, seq1[:8]
# epochs and seeds differ; seed-none is shard order
assert [r for x in read_view(1, 1, 1) for r in x] != seq1
assert [r for x in read_view(1, 2, 0) for r in x] != seq1
assert [r for x in read_view(1, "none", 0) for r in x] == records
# matctl batches places the same records
js = json.loads(subprocess.run([matctl, "--store", store, "batches", "rec", "4",
                                "--seed", "1", "--epoch", "0", "--json"],
                               check=True, capture_output=True).stdout)
g4 = read_view(4, 1, 0)
assert len(js["batches"]) == len(g4), (len(js["batches"]), len(g4))
for b, got in zip(js["batches"], g4):
    want = [shards[s][(r + i) * R:(r + i + 1) * R]
            for s, r, c in b["runs"] for i in range(c)]
    assert want == got, b
# ranks: equal counts in whole rounds, rank R's k-th = global R + kW
rounds = len(g4) // 3
for r in range(3):
    v = read_view(4, 1, 0, "rank-%d-of-3" % r)
    assert len(v) == rounds, (r, len(v), rounds)
    assert v == [g4[r + 3 * k] for k in range(rounds)], r
    v = read_view(4, 1, 0, "rank-%d-of-3-from-5" % r)
    assert len(v) == (len(g4) - 5) // 3
    assert v == [g4[5 + r + 3 * k] for k in range(len(v))], r
# a job of 2 ranks reads 3 rounds, then resumes on 3 ranks from global 6:
# every record of the epoch's whole batches exactly once
seen = []
for r in range(2):
    seen += [x for k in range(3) for x in read_view(4, 1, 0, "rank-%d-of-2" % r)[k]]
for r in range(3):
    seen += [x for b in read_view(4, 1, 0, "rank-%d-of-3-from-6" % r) for x in b]
left = (len(g4) - 6) % 3  # the last incomplete round is dropped
assert len(seen) == (len(g4) - left) * 4 and len(set(seen)) == len(seen)
assert set(seen) == {x for b in g4[:len(g4) - left] for x in b}
# stat gives the exact size, and user.matfs.global_batch the place
st = os.stat(path(4, 1, 0, 2, "rank-1-of-3"))
assert st.st_size == 1024 and st.st_mode & 0o777 == 0o444, st
assert os.getxattr(path(4, 1, 0, 2, "rank-1-of-3"), "user.matfs.global_batch") == b"7"
# past the end: ENOENT at the same k for every rank
for r in range(3):
    try:
        os.stat(path(4, 1, 0, rounds, "rank-%d-of-3" % r))
    except OSError as e:
        assert e.errno == errno.ENOENT
    else:
        raise AssertionError("rank %d has batch %d" % (r, rounds))
# bad names are ENOENT, never EINVAL
base = os.path.join(snap, "batches")
bad = ["0", "-1", "01", "+4", " 4", "4 ", "9223372036854775808",
       "18446744073709551616", "4/seed-", "4/seed-01", "4/seed-x",
       "4/seed-18446744073709551616", "4/seed-1/epoch-", "4/seed-1/epoch-01",
       "4/seed-1/epoch-0/batch-42", "4/seed-1/epoch-0/batch-0000042",
       "4/seed-1/epoch-0/batch-", "4/seed-1/epoch-0/rank-3-of-3",
       "4/seed-1/epoch-0/rank-0-of-0", "4/seed-1/epoch-0/rank-0-of-3-from-",
       "4/seed-1/epoch-0/rank-0-of-3/rank-0-of-3",
       "4/seed-1/epoch-0/batch-000000/x", "4/seed-1/x", "4/x", "x",
       "4/seed-1/epoch-0/batch-9223372036854775808",
       "4/seed-1/epoch-0/batch-274877906943", "4/seed-1/epoch-0/batch-9223372036854775807"]
for b in bad:
    try:
        os.stat(os.path.join(base, b))
    except OSError as e:
        assert e.errno in (errno.ENOENT, errno.ENOTDIR), (b, e)
    else:
        raise AssertionError("%s exists" % b)
# a batch file is read-only; folders list nothing above an epoch
try:
    open(path(4, 1, 0, 0), "r+b")
except OSError as e:
    assert e.errno == errno.EACCES, e
else:
    raise AssertionError("a batch opened for writing")
assert os.listdir(os.path.join(base, "4")) == []
# nothing in the tree is removed, made or written
for fn, p, want in ((os.unlink, path(4, 1, 0, 0), errno.EPERM),
                    (os.rmdir, os.path.join(base, "4"), errno.EPERM),
                    (os.rmdir, base, errno.EPERM),
                    (os.mkdir, os.path.join(base, "4", "x"), None)):
    try:
        fn(p)
    except OSError as e:
        assert want is None or e.errno == want, (fn.__name__, p, e)
    else:
        raise AssertionError("%s %s" % (fn.__name__, p))
assert not os.access(path(4, 1, 0, 0), os.W_OK)
assert not os.access(os.path.join(base, "4"), os.W_OK)
assert os.access(os.path.join(base, "4"), os.R_OK | os.X_OK)
print("ok")
PY
pass "records once, one order for every B and W, ranks, resume, names"

# no records: no tree
[ -e "$mnt/plain/batches" ] && fail "a snapshot without records has batches"
cat "$mnt/plain/batches/1/seed-1/epoch-0/batch-000000" 2>/dev/null &&
  fail "a batch of a snapshot without records"
pass "no tree without records"

# the same bytes after a remount
md5() { cat "$mnt/rec/batches/3/seed-9/epoch-4/batch-00000$1" | md5sum; }
before="$(md5 0)$(md5 5)"
umount_fs "$mnt" "$mpid"
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o workers=2
wait_for 10 test -L "$mnt/rec" || fail "no rec name after the remount"
[ "$(md5 0)$(md5 5)" = "$before" ] || fail "batches differ after a remount"
pass "the same batches after a remount"

# folders past the per-user bound: ENFILE, and back once forgotten
"$py" - "$mnt" <<'PY' || fail "folder bound"
import errno, os, sys
base = os.path.join(sys.argv[1], "rec", "batches", "2", "seed-5")
enfile = 0
for e in range(5000):
    try:
        os.stat(os.path.join(base, "epoch-%d" % e))
    except OSError as x:
        assert x.errno == errno.ENFILE, x
        enfile += 1
assert enfile > 0, "no bound on folders"
print("ENFILE for", enfile)
PY
sync
echo 2 >/proc/sys/vm/drop_caches
wait_for 10 stat "$mnt/rec/batches/2/seed-5/epoch-99999" >/dev/null ||
  fail "folders still refused once the kernel forgot them"
grep -q 'batch tree folders past the bound' "$log" || fail "the bound not logged"
pass "folders bounded per user"

umount_fs "$mnt" "$mpid"
echo "all passed"
