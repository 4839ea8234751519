#!/usr/bin/env bash
# test_mount_batch_framings.sh - batch files in every framing on a real
# mount (docs/format.md §10): lines batches are B lines (a shard's last
# line without a newline gains one), TFRecord batches are valid TFRecord
# files (frames and CRCs checked here), tar batches are tar archives of
# whole samples that Python's tarfile reads, with the two end blocks,
# every framing's batches but fixed records carry user.matfs.record_ends
# (for tar, each sample's end; the end blocks after the last); in each, every
# record of an epoch's whole batches is there once, as the shards hold
# it, and stat gives the size read.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes"/{lines,tf,tar,idx}
"$py" - "$pipes" <<'PY' || fail "making inputs"
import io, struct, sys, tarfile
p = sys.argv[1]
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 & -(c & 1))
    return c ^ 0xffffffff
def mask(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
for i in range(4):
    body = b"".join(b"file %d line %d\n" % (i, k) for k in range(5 + 3 * i))
    if i % 2:
        body += b"file %d last line without newline" % i
    open("%s/lines/%d" % (p, i), "wb").write(body)
    with open("%s/tf/%d" % (p, i), "wb") as f:
        for k in range(6 + i):
            data = b"tf %d %d " % (i, k) + bytes([k]) * (k * 37 % 300)
            n = struct.pack("<Q", len(data))
            f.write(n + struct.pack("<I", mask(crc32c(n))) + data +
                    struct.pack("<I", mask(crc32c(data))))
    with tarfile.open("%s/tar/%d" % (p, i), "w", format=tarfile.USTAR_FORMAT) as t:
        for k in range(4 + i):
            for ext, body in (("jpg", b"x%d.%d" % (i, k) * (k * 99)), ("cls", b"%d %d" % (i, k))):
                ti = tarfile.TarInfo("s%d_%04d.%s" % (i, k, ext))
                ti.size = len(body)
                t.addfile(ti, io.BytesIO(body))
    open("%s/idx/%d" % (p, i), "wb").write(
        b"".join(b"idx %d record %d %s\n" % (i, k, b"#" * k) for k in range(7 + i)))
PY
cat >"$pipes/ends.py" <<'PY'
import os, struct, sys
# each input line is a record, without its newline; the ends go to fd 3
lines = sys.stdin.buffer.read().split(b"\n")[:-1]
ends, pos = [], 0
for l in lines:
    pos += len(l)
    ends.append(pos)
with os.fdopen(3, "wb") as f:
    f.write(b"".join(struct.pack("<Q", e) for e in ends))
sys.stdout.buffer.write(b"".join(lines))
PY
for n in lines tf tar; do
  rec=$n; [ "$n" = tf ] && rec=tfrecord
  printf 'name: %s\ninputs: %s/*\nshards: 4\nchunk_size: 4KiB\nrecords: %s\nstages:\n  - exec: [cat]\n' \
    "$n" "$n" "$rec" >"$pipes/$n.yaml"
done
cat >"$pipes/idx.yaml" <<'YAML'
name: idx
inputs: idx/*
shards: 4
records: index
stages:
  - exec: [cat]
  - exec: [python3, ends.py]
    deps: [ends.py]
YAML
mkdir -p "$pipes/big"
seq 1 9100 >"$pipes/big/a"
sed 's/idx/big/g; s/shards: 4/shards: 1/' "$pipes/idx.yaml" >"$pipes/big.yaml"
mount_fs "$mnt" "$store" "$pipes"
for n in lines tf tar idx big; do
  wait_for 10 test -L "$mnt/$n" || fail "no $n name"
done

"$py" - "$mnt" <<'PY' || fail "batch files in their framings"
import collections, errno, io, os, struct, sys, tarfile, time
mnt = sys.argv[1]
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 & -(c & 1))
    return c ^ 0xffffffff
def mask(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def frames(d):
    out, at = [], 0
    while at < len(d):
        n, = struct.unpack_from("<Q", d, at)
        assert struct.unpack_from("<I", d, at + 8)[0] == mask(crc32c(d[at:at + 8]))
        data = d[at + 12:at + 12 + n]
        assert struct.unpack_from("<I", d, at + 12 + n)[0] == mask(crc32c(data))
        out.append(d[at:at + 16 + n])
        at += 16 + n
    return out
def samples(d):  # whole samples: (key, {ext: bytes}) in order
    out = []
    with tarfile.open(fileobj=io.BytesIO(d)) as t:
        for m in t.getmembers():
            key, ext = m.name.split(".", 1)
            if not out or out[-1][0] != key:
                out.append((key, {}))
            out[-1][1][ext] = t.extractfile(m).read()
    return [(k, tuple(sorted(v.items()))) for k, v in out]
def lines(d):
    out = [l + b"\n" for l in d.split(b"\n")[:-1]]
    if d and not d.endswith(b"\n"):
        out.append(d.rsplit(b"\n", 1)[-1] + b"\n")
    return out
def shards(name):
    snap = os.path.join(mnt, name)
    return [open(os.path.join(snap, f), "rb").read() for f in sorted(os.listdir(snap))]
B = 3
for name, parse in (("lines", lines), ("tf", frames), ("tar", samples), ("idx", None)):
    sh = shards(name)  # computes all; served before their commit
    snap = os.path.join(mnt, name)
    for _ in range(600):  # stat is exact once they are committed
        if os.getxattr(snap, "user.matfs.state") == b"materialized":
            break
        time.sleep(0.05)
    if name == "idx":
        recs = []
        for k, d in enumerate(sh):
            src = open(os.path.join(os.path.dirname(mnt), "p", "idx", str(k)), "rb").read()
            recs += src.split(b"\n")[:-1]
    else:
        recs = [r for d in sh for r in parse(d)]
    got, n = [], 0
    base = os.path.join(mnt, name, "batches", str(B), "seed-1", "epoch-0")
    while True:
        p = os.path.join(base, "batch-%06d" % n)
        try:
            d = open(p, "rb").read()
        except OSError as e:
            assert e.errno == errno.ENOENT, (name, n, e)
            break
        assert os.stat(p).st_size == len(d), (name, n, os.stat(p).st_size, len(d))
        # every framing's batch has its record ends
        v = os.getxattr(p, "user.matfs.record_ends")
        ends = list(struct.unpack("<%dQ" % (len(v) // 8), v))
        assert len(ends) == B, (name, ends)
        pieces = [d[a:b] for a, b in zip([0] + ends[:-1], ends)]
        if name == "idx":
            assert ends[-1] == len(d), (ends, len(d))
            batch = pieces
        else:
            batch = parse(d)
        if name == "tar":  # each piece one sample; the end blocks after
            assert ends[-1] == len(d) - 1024, (ends, len(d))
            assert [samples(x)[0] for x in pieces] == batch, n
        elif name != "idx":
            assert pieces == batch, (name, n)
        if name == "tar":
            assert d.endswith(b"\0" * 1024) and len(d) % 512 == 0
        if name == "lines":
            assert d.count(b"\n") == B and d.endswith(b"\n")
        assert len(batch) == B, (name, n, len(batch))
        got += batch
        n += 1
    assert n == len(recs) // B, (name, n, len(recs))
    assert len(got) == len(set(got)) or name == "tar", name
    assert not (collections.Counter(got) - collections.Counter(recs)), name
    assert got != recs[:len(got)], "%s batches in shard order" % name
    print(name, n, "batches of", B, "from", len(recs), "records")
PY
pass "lines, TFRecord, tar and index batches are their framing's files"

# a listing of an idx batch's xattrs names record_ends; B past 8192: E2BIG
f=$mnt/idx/batches/2/seed-none/epoch-0/batch-000000
getfattr -d --absolute-names "$f" 2>&1 | grep -q 'user.matfs.record_ends=' ||
  fail "getfattr -d of an index batch: no record_ends"
"$py" - "$mnt/big/batches/9000/seed-none/epoch-0/batch-000000" <<'PY' || fail "E2BIG"
import errno, os, sys
assert len(open(sys.argv[1], "rb").read()) > 9000
try:
    os.getxattr(sys.argv[1], "user.matfs.record_ends")
except OSError as e:
    assert e.errno == errno.E2BIG, e
else:
    raise AssertionError("record ends of 9000 records fit an xattr")
PY
pass "record ends listed; E2BIG past 8192 records"
umount_fs "$mnt" "$mpid"
echo "all passed"
