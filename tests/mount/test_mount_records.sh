#!/usr/bin/env bash
# test_mount_records.sh - records on a real mount: a fixed size (records
# across 4 KiB chunk boundaries, one record, an empty shard), lines (a
# last line without a newline), TFRecord frames and WebDataset tar
# samples read back byte for byte, with user.matfs.records on each shard
# and on the snapshot once every shard is materialized; output that
# breaks its framing fails the open with EIO, names the offset in
# user.matfs.error, and commits nothing.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes"/{fixed,lines,tf,tar,bad}
head -c 8192 /dev/urandom >"$pipes/fixed/a"     # 1024 records of 8
head -c 8 /dev/urandom >"$pipes/fixed/b"        # one record
: >"$pipes/fixed/c"                             # none
printf 'one\ntwo\n\nlast without newline' >"$pipes/lines/a"
: >"$pipes/lines/b"
"$py" - "$pipes" <<'PY' || fail "making inputs"
import io, struct, sys, tarfile
def crc32c(b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 & -(c & 1))
    return c ^ 0xffffffff
def mask(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
with open(sys.argv[1] + "/tf/a", "wb") as f:
    for k in range(300):
        data = bytes([k % 251]) * (k * 13 % 700)
        n = struct.pack("<Q", len(data))
        f.write(n + struct.pack("<I", mask(crc32c(n))) + data +
                struct.pack("<I", mask(crc32c(data))))
with tarfile.open(sys.argv[1] + "/tar/a", "w", format=tarfile.USTAR_FORMAT) as t:
    for k in range(5):
        for ext, body in (("jpg", b"x" * (k * 999)), ("cls", b"%d" % k)):
            ti = tarfile.TarInfo("s%04d.%s" % (k, ext))
            ti.size = len(body)
            t.addfile(ti, io.BytesIO(body))
PY
head -c 13 /dev/urandom >"$pipes/bad/a"
spec() { # NAME RECORDS
  cat >"$pipes/$1.yaml" <<YAML
name: $1
inputs: $1/*
chunk_size: 4KiB
records: $2
stages:
  - exec: [cat]
YAML
}
spec fixed 8
spec lines lines
spec tf tfrecord
spec tar tar
spec bad 8
mount_fs "$mnt" "$store" "$pipes"

check() { # NAME SHARD WANT_RECORDS INPUT
  local f=$mnt/$1/shard-0000$2
  cmp -s "$f" "$4" || fail "$1 shard $2: bytes differ from the stage's output"
  local got; got=$(xattr "$f" records)
  [ "$got" = "$3" ] || fail "$1 shard $2: user.matfs.records '$got', not $3"
}
check fixed 0 1024 "$pipes/fixed/a"
check fixed 1 1 "$pipes/fixed/b"
check fixed 2 0 "$pipes/fixed/c"
[ "$(xattr "$mnt/fixed/shard-00000" framing)" = 8 ] || fail "fixed framing"
[ "$(xattr "$mnt/fixed" records)" = 1025 ] || fail "snapshot records of fixed"
check lines 0 4 "$pipes/lines/a"
[ -z "$(xattr "$mnt/lines" records)" ] ||
  fail "a snapshot's records before every shard is materialized"
check lines 1 0 "$pipes/lines/b"
[ "$(xattr "$mnt/lines" records)" = 4 ] || fail "snapshot records of lines"
check tf 0 300 "$pipes/tf/a"
check tar 0 5 "$pipes/tar/a"
[ "$(xattr "$mnt/tar/shard-00000" framing)" = tar ] || fail "tar framing"
pass "fixed, lines, tfrecord and tar shards read back with their record counts"

out=$(cat "$mnt/bad/shard-00000" 2>&1) && fail "a shard that breaks its framing opened"
case $out in *"Input/output error"*) ;; *) fail "bad shard: '$out', not EIO" ;; esac
err=$(xattr "$mnt/bad/shard-00000" error)
case $err in
  *"stage output is 13 bytes, not a multiple of the 8-byte record (5 bytes over)"*) ;;
  *) fail "bad shard's error: '$err'" ;;
esac
[ "$(xattr "$mnt/bad/shard-00000" state)" = failed ] || fail "bad shard's state"
found=$(find "$store" -name 'shard-*.mfs' -path "*$(readlink "$mnt/bad")*")
[ -z "$found" ] || fail "a shard that broke its framing was committed: $found"
pass "output that breaks its framing fails the open with its message, nothing committed"
umount_fs "$mnt" "$mpid"
