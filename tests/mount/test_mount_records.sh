#!/usr/bin/env bash
# test_mount_records.sh - records on a real mount: a fixed size (records
# across 4 KiB chunk boundaries, one record, an empty shard), lines (a
# last line without a newline), TFRecord frames, WebDataset tar samples
# and ends a stage wrote to fd 3 (more than a pipe holds, before its
# output) read back byte for byte, with user.matfs.records on each shard
# and on the snapshot once every shard is materialized; output that
# breaks its framing fails the open with EIO, names the offset in
# user.matfs.error, and commits nothing.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes"/{fixed,lines,tf,tar,bad,idx,flat,odd}
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
for d in idx flat odd; do seq 1 20000 >"$pipes/$d/a"; done
cat >"$pipes/ends.py" <<'PY'
import os, struct, sys
# each input line is a record, without its newline; the ends go to fd 3
# first (160 KB: more than a pipe holds), then the output
lines = sys.stdin.buffer.read().split(b"\n")[:-1]
ends, pos = [], 0
for l in lines:
    pos += len(l)
    ends.append(pos)
if sys.argv[1] == "flat":
    ends[5] = ends[4]
idx = b"".join(struct.pack("<Q", e) for e in ends)
if sys.argv[1] == "odd":
    idx += b"\0\0\0"
with os.fdopen(3, "wb") as f:
    f.write(idx)
sys.stdout.buffer.write(b"".join(lines))
PY
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
for d in idx flat odd; do
  cat >"$pipes/$d.yaml" <<YAML
name: $d
inputs: $d/*
records: index
stages:
  - exec: [cat]
  - exec: [python3, ends.py, $d]
    deps: [ends.py]
YAML
done
mount_fs "$mnt" "$store" "$pipes"

materialized() { [ "$(xattr "$1" state)" = materialized ]; }
check() { # NAME SHARD WANT_RECORDS INPUT
  local f=$mnt/$1/shard-0000$2
  cmp -s "$f" "$4" || fail "$1 shard $2: bytes differ from the stage's output"
  # a shard is served once sealed; its row says materialized once committed
  wait_for 30 materialized "$f" || fail "$1 shard $2 never materialized"
  local got; got=$(xattr "$f" records)
  [ "$got" = "$3" ] || fail "$1 shard $2: user.matfs.records '$got', not $3"
}
check fixed 0 1024 "$pipes/fixed/a"
check fixed 1 1 "$pipes/fixed/b"
check fixed 2 0 "$pipes/fixed/c"
[ "$(xattr "$mnt/fixed/shard-00000" framing)" = 8 ] || fail "fixed framing"
[ "$(xattr "$mnt/fixed" records)" = 1025 ] || fail "snapshot records of fixed"
# listed, and its value given, as getfattr -d asks (a list, then each)
all=$(getfattr -d --absolute-names "$mnt/fixed" 2>&1) || fail "getfattr -d: $all"
case $all in *'user.matfs.records="1025"'*) ;; *) fail "getfattr -d of fixed: $all" ;; esac
check lines 0 4 "$pipes/lines/a"
[ -z "$(xattr "$mnt/lines" records)" ] ||
  fail "a snapshot's records before every shard is materialized"
check lines 1 0 "$pipes/lines/b"
[ "$(xattr "$mnt/lines" records)" = 4 ] || fail "snapshot records of lines"
[ "$(xattr "$mnt/tf" framing)" = tfrecord ] ||
  fail "a snapshot's framing before any shard is computed: '$(xattr "$mnt/tf" framing)'"
check tf 0 300 "$pipes/tf/a"
check tar 0 5 "$pipes/tar/a"
[ "$(xattr "$mnt/tar/shard-00000" framing)" = tar ] || fail "tar framing"
st=$("$matctl" --store "$store" stat fixed) || fail "matctl stat fixed"
case $st in *"records      1025 in 3 of 3 shards (8)"*) ;; *) fail "matctl stat: $st" ;; esac
row=$(printf '%s\n' "$st" | awk '$1 == "0" && $2 == "materialized" {print $(NF-1)}')
[ "$row" = 1024 ] || fail "matctl stat: shard 0's records '$row': $st"
js=$("$matctl" --store "$store" --json stat fixed) || fail "matctl --json stat"
"$py" -c 'import json, sys
d = json.loads(sys.argv[1])
assert d["snapshot"]["records"] == 1025 and d["snapshot"]["framing"] == "8", d
assert [s["records"] for s in d["shards"]] == [1024, 1, 0], d' "$js" ||
  fail "matctl --json stat: $js"
tr -d '\n' <"$pipes/idx/a" >"$tmp/idx.want"
check idx 0 20000 "$tmp/idx.want"
pass "fixed, lines, tfrecord, tar and index shards read back with their record counts"

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
bad_index() { # NAME MESSAGE
  cat "$mnt/$1/shard-00000" >/dev/null 2>&1 && fail "$1: a bad index opened"
  local e; e=$(xattr "$mnt/$1/shard-00000" error)
  case $e in *"$2"*) ;; *) fail "$1's error: '$e'" ;; esac
}
bad_index flat "record end 5 from fd 3 (number 5) does not increase on 5"
bad_index odd "fd 3 got 160003 bytes, not a whole number of 8-byte record ends (3 bytes over)"
found=$(find "$store" -name 'shard-*.mfs' -path "*$(readlink "$mnt/flat")*")
[ -z "$found" ] || fail "a shard with a bad index was committed: $found"
pass "output that breaks its framing fails the open with its message, nothing committed"
umount_fs "$mnt" "$mpid"
