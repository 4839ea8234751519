#!/usr/bin/env bash
# test_mount_rm.sh - taking data away and refusing changes: rm of a shard
# and rm -r of a snapshot expire them and the next read recomputes; a
# descriptor opened before rm -r reads the right bytes to its end; writes,
# creates, mkdir, rename, links, truncate, chmod and xattr changes get their
# exact errnos; a corrupt chunk in a file still read after rm and a
# recompute expires only that file's computation.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1 2; do printf 'input %d\n' $k >"$pipes/in/$k.txt"; done
cat >"$pipes/data.yaml" <<'YAML'
name: data
inputs: in/*.txt
chunk_size: 16KiB
# one level for every chunk: the corruption below finds the chunk in the
# middle of the shard by its place in the file
compression_adapt: false
suffix: .bin
stages:
  - exec: [/bin/sh, -c, 'echo "$MATFS_SHARD" >> calls; cat; seq 1 200000']
YAML
for k in 0 1 2; do
  ( cd "$pipes" && sh -c 'cat; seq 1 200000' <"in/$k.txt" ) >"$tmp/want$k"
done
mount_fs "$mnt" "$store" "$pipes"
fp=$(readlink "$mnt/data")
d=$mnt/data

for k in 0 1 2; do cmp "$d/shard-0000$k.bin" "$tmp/want$k" || fail "first read of $k"; done
[ "$(calls "$pipes/calls")" -eq 3 ] || fail "first reads: $(calls "$pipes/calls") calls"

# --- rm of a shard expires it; the next read recomputes ---
rm "$d/shard-00001.bin" || fail "rm of a shard"
[ "$(xattr "$d/shard-00001.bin" state)" = absent ] || fail "state after rm"
[ "$(stat -c %s "$d/shard-00001.bin")" -eq 0 ] || fail "size after rm"
[ -z "$(ls "$store/snapshots/$fp"/*/shard-00001.mfs 2>/dev/null)" ] || fail "store file kept"
listing=$(ls "$d") || fail "an expired shard left the listing"
grep -qx shard-00001.bin <<<"$listing" || fail "an expired shard left the listing"
cmp "$d/shard-00001.bin" "$tmp/want1" || fail "read after rm"
[ "$(calls "$pipes/calls")" -eq 4 ] || fail "rm: $(calls "$pipes/calls") calls, want 4"
cmp "$d/shard-00000.bin" "$tmp/want0" || fail "shard 0 after rm of 1"
[ "$(calls "$pipes/calls")" -eq 4 ] || fail "rm of 1 recomputed another shard"
pass "rm of a shard expires it and the next read recomputes it"

# --- an open descriptor survives rm -r, which expires the snapshot ---
"$py" - "$d/shard-00002.bin" "$tmp/want2" "$mnt/$fp" <<'PY' || fail "descriptor across rm -r"
import mmap, os, subprocess, sys
want = open(sys.argv[2], "rb").read()
f = open(sys.argv[1], "rb", buffering=0)
head = f.read(100000)
subprocess.run(["rm", "-r", sys.argv[3]], check=True)
rest = b""
while True:
    b = f.read(65536)
    if not b:
        break
    rest += b
assert head + rest == want, (len(head), len(rest), len(want))
# the path names the next computation; the descriptor still the old one
assert os.stat(sys.argv[1]).st_size == 0
assert os.fstat(f.fileno()).st_size == len(want)
with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
    assert mm[:] == want
f.close()
PY
[ -z "$(ls "$store/snapshots/$fp"/*/*.mfs 2>/dev/null)" ] || fail "rm -r left store files"
for k in 0 1 2; do
  [ "$(xattr "$d/shard-0000$k.bin" state)" = absent ] || fail "shard $k not absent after rm -r"
done
[ "$(ls "$mnt/$fp" | wc -l)" -eq 3 ] || fail "registered snapshot not listed after rm -r"
[ "$(xattr "$mnt/$fp" materialized)" = 0 ] || fail "materialized count after rm -r"
pass "rm -r expires the snapshot; a descriptor opened before reads to its end"

for k in 0 1 2; do cmp "$d/shard-0000$k.bin" "$tmp/want$k" || fail "read $k after rm -r"; done
[ "$(calls "$pipes/calls")" -eq 7 ] || fail "rm -r: $(calls "$pipes/calls") calls, want 7"
# the reads can end before the commits of what they read (served sealed);
# polled through the mount, not with a new catalog connection (matctl)
# every 50 ms, which held them back with slow fsyncs
committed() {
  local k
  for k in 0 1 2; do
    [ "$(xattr "$d/shard-0000$k.bin" state)" = materialized ] || return 1
  done
}
wait_for 20 committed || fail "not committed 20 s after the reads"
"$matctl" --store "$store" stat data --json | "$py" -c '
import json, sys
v = json.load(sys.stdin)
assert [s["state"] for s in v["shards"]] == ["materialized"] * 3, v
' || fail "matctl stat after recompute"
pass "after rm -r every shard is computed again"

# --- refused changes, exact errnos ---
"$py" - "$mnt" "$fp" <<'PY' || fail "refused changes"
import errno, os, sys
mnt, fp = sys.argv[1], sys.argv[2]
d = os.path.join(mnt, fp)
shard = os.path.join(d, "shard-00000.bin")

def expect(err, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        assert e.errno == err, (fn.__name__, args, errno.errorcode[e.errno])
        return
    raise AssertionError((fn.__name__, args, "succeeded"))

assert os.access(shard, os.R_OK) and not os.access(shard, os.W_OK)
assert not os.access(shard, os.X_OK)
expect(errno.EACCES, os.open, shard, os.O_WRONLY)
expect(errno.EACCES, os.open, shard, os.O_RDWR)
expect(errno.EACCES, os.open, shard, os.O_RDONLY | os.O_TRUNC)
expect(errno.EACCES, os.truncate, shard, 0)
expect(errno.EROFS, os.open, os.path.join(d, "new"), os.O_WRONLY | os.O_CREAT, 0o644)
expect(errno.EROFS, os.open, os.path.join(mnt, "new"), os.O_WRONLY | os.O_CREAT, 0o644)
expect(errno.EROFS, os.mkdir, os.path.join(mnt, "newdir"))
expect(errno.EROFS, os.mkdir, os.path.join(d, "newdir"))
expect(errno.EROFS, os.rename, shard, os.path.join(d, "moved"))
expect(errno.EROFS, os.rename, d, os.path.join(mnt, "moved"))
expect(errno.EROFS, os.symlink, "x", os.path.join(d, "link"))
expect(errno.EROFS, os.link, shard, os.path.join(d, "hard"))
expect(errno.EPERM, os.chmod, shard, 0o644)
expect(errno.EPERM, os.utime, shard, (0, 0))
expect(errno.EPERM, os.unlink, os.path.join(mnt, "data"))
expect(errno.EPERM, os.setxattr, shard, "user.matfs.state", b"absent")
expect(errno.EPERM, os.setxattr, shard, "user.comment", b"mine")
expect(errno.EPERM, os.setxattr, d, "user.comment", b"mine")
expect(errno.EPERM, os.removexattr, shard, "user.comment")
expect(errno.EPERM, os.removexattr, shard, "user.matfs.state")
expect(errno.ENOTDIR, os.rmdir, os.path.join(mnt, "data"))
expect(errno.ENOTDIR, os.rmdir, shard)
expect(errno.EISDIR, os.unlink, d)
expect(errno.ENOENT, os.unlink, os.path.join(d, "shard-00003.bin"))
expect(errno.ENOENT, os.open, os.path.join(d, "shard-3.bin"), os.O_RDONLY)
expect(errno.ENAMETOOLONG, os.mkdir, os.path.join(d, "x" * 256))
with open(shard, "rb") as f:
    expect(errno.EBADF, os.write, f.fileno(), b"x")
PY
[ "$(calls "$pipes/calls")" -eq 7 ] || fail "refused changes ran stages"
cmp "$d/shard-00000.bin" "$tmp/want0" || fail "shard 0 after refused changes"
pass "open for writing, truncate: EACCES; create, mkdir, rename, links: EROFS; chmod, utime, rm of a name, setxattr: EPERM"
umount_fs "$mnt" "$mpid"

# --- a corrupt chunk in a file read after rm expires only that file ---
# A small chunk cache, so the old file's chunks are read from it again,
# and none of its pages in the kernel's cache before the first read.
mount_fs "$mnt" "$store" "$pipes" -o cache=256KiB,nopush
"$py" - "$d/shard-00001.bin" "$tmp/want1" "$mpid" <<'PY' || fail "corrupt old file after rm"
import errno, os, sys
path, want, pid = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3]
os.unlink(path)
f = open(path, "rb", buffering=0)   # computes X in this daemon's run
os.unlink(path)                     # expires X; f still reads it
assert open(path, "rb").read() == want  # Y: the same run, computed again
fds = "/proc/%s/fd" % pid
def target(n):  # the daemon may close n while we look
    try:
        return os.readlink(os.path.join(fds, n))
    except FileNotFoundError:
        return ""
old = [os.path.join(fds, n) for n in os.listdir(fds)
       if target(n).endswith("shard-00001.mfs (deleted)")]
assert len(old) == 1, old
with open(old[0], "r+b") as x:     # X's chunks, not its index and trailer
    size = os.fstat(x.fileno()).st_size
    x.seek(size // 8)
    chunks = x.read(size * 5 // 8)
    x.seek(size // 8)
    x.write(bytes(b ^ 0x5a for b in chunks))
try:
    f.seek(len(want) // 2)
    f.read(65536)
    sys.exit("a corrupt chunk was served")
except OSError as e:
    assert e.errno == errno.EIO, e
f.close()
PY
# Y's read can end before its commit (served sealed); a report that
# expired Y leaves it absent, never materialized
wait_for 20 eval '[ "$(xattr "$d/shard-00001.bin" state)" = materialized ]' ||
  fail "the report expired the new computation: $(xattr "$d/shard-00001.bin" state)"
[ -n "$(ls "$store/snapshots/$fp"/*/shard-00001.mfs 2>/dev/null)" ] || fail "the new computation's file was removed"
n=$(calls "$pipes/calls")
cmp "$d/shard-00001.bin" "$tmp/want1" || fail "read of the new computation"
[ "$(calls "$pipes/calls")" -eq "$n" ] || fail "the new computation was computed again"
umount_fs "$mnt" "$mpid"
pass "a corrupt chunk in a file read after rm expires only that computation"
