#!/usr/bin/env bash
# test_mount_hostile.sh - hostile names and inputs through a real mount:
# 4000-byte names, names with newlines or "..", shard indexes out of range,
# a stage whose children hang past its timeout (all killed, EIO), and a
# symlink planted in the store in place of a shard file (never followed:
# the shard is computed again, never served from the link's target).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'one\n' >"$pipes/in/a.txt"
cat >"$pipes/ok.yaml" <<'YAML'
name: ok
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo x >> calls; cat; seq 1 1000']
YAML
cat >"$pipes/hang.yaml" <<'YAML'
name: hang
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'for i in 1 2 3; do sleep 1000 & echo $! >> pids; done; cat; sleep 1000']
    timeout: 1s
YAML
( cd "$pipes" && sh -c 'cat; seq 1 1000' <in/a.txt ) >"$tmp/want"
mount_fs "$mnt" "$store" "$pipes"
d=$mnt/ok

# --- names ---
/usr/bin/python3 - "$mnt" "$d" <<'PY' || fail "hostile names"
import errno, os, sys
mnt, d = sys.argv[1], sys.argv[2]
def expect(err, path):
    try:
        os.stat(path)
    except OSError as e:
        assert e.errno == err, (path[:80], e)
        return
    raise AssertionError("stat succeeded: %r" % path[:80])
expect(errno.ENAMETOOLONG, os.path.join(mnt, "a" * 4000))
expect(errno.ENAMETOOLONG, os.path.join(d, "shard-" + "0" * 4000))
for name in ["shard-00000\n", "shard-00000\n.bin", "\n", "shard-0",
             "shard-99999", "shard-00001", "shard--0001", "shard-0000a",
             "..shard-00000", "x/..", "ok\n"]:
    expect(errno.ENOENT, os.path.join(d, name))
expect(errno.ENOENT, os.path.join(mnt, "ok\n"))
expect(errno.ENOENT, os.path.join(mnt, "0" * 64))
assert os.path.samefile(os.path.join(d, ".."), mnt)
assert sorted(os.listdir(d)) == ["shard-00000"], os.listdir(d)
PY
pass "4000-byte names, newlines, '..' and indexes out of range"

# --- a stage whose children hang: the timeout kills them all ---
start=$(date +%s)
if cat "$mnt/hang/shard-00000" >/dev/null 2>"$tmp/err"; then fail "hang: read succeeded"; fi
grep -q 'Input/output error' "$tmp/err" || fail "hang: $(cat "$tmp/err")"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "the timeout did not stop the stage"
[ "$(xattr "$mnt/hang/shard-00000" state)" = failed ] || fail "hang: state"
grep -q 'timed out' <<<"$(xattr "$mnt/hang/shard-00000" error)" || fail "hang: error"
wait_for 5 sh -c 'for p in $(cat "$0"); do kill -0 "$p" 2>/dev/null && exit 1; done; exit 0' \
  "$pipes/pids" || fail "a hanging child survived the timeout"
pass "a stage's hanging children are all killed at its timeout"

# --- a symlink planted in the store is never followed ---
cmp "$d/shard-00000" "$tmp/want" || fail "first read"
# the read can end before the commit of what it read (served sealed)
committed() { [ "$(xattr "$d/shard-00000" state)" = materialized ]; }
wait_for 20 committed || fail "first read: not materialized"
f=$(ls "$store"/snapshots/*/*/shard-00000.mfs | head -1)
[ -f "$f" ] || fail "no store file"
rm "$f" && ln -s /etc/passwd "$f"
fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
reap "$mpid"
mount_fs "$mnt" "$store" "$pipes"
cmp "$mnt/ok/shard-00000" "$tmp/want" || fail "read after a planted symlink"
[ "$(calls "$pipes/calls")" -eq 2 ] || fail "planted symlink: $(calls "$pipes/calls") calls, want 2"
[ -L "$f" ] && fail "the planted symlink is still the shard file"
pass "a planted symlink in the store is refused and the shard recomputed"

# --- a shard past the daemon's file size limit fails; the daemon lives ---
printf 'name: big\ninputs: in/*.txt\nchunk_size: 1MiB\ncompression: none\nstages:\n  - exec: [/bin/sh, -c, %s]\n' \
  "'cat >/dev/null; head -c \$(cat size) /dev/zero'" >"$pipes/big.yaml"
echo 20000000 >"$pipes/size"
wait_for 10 test -L "$mnt/big" || fail "big not registered"
prlimit --pid "$mpid" --fsize=8388608:8388608 || fail "prlimit"
cat "$mnt/big/shard-00000" >/dev/null 2>"$tmp/err" && fail "a shard past the limit was served"
kill -0 "$mpid" 2>/dev/null || fail "the daemon died at its file size limit"
grep -q 'File too large' <<<"$(xattr "$mnt/big/shard-00000" error)" ||
  fail "big: error $(xattr "$mnt/big/shard-00000" error)"
echo 3000000 >"$pipes/size"
rm -f "$mnt/big/shard-00000"
[ "$(head -c 3000000 /dev/zero | cmp - "$mnt/big/shard-00000" && echo same)" = same ] ||
  fail "a shard within the limit after one past it"
pass "a shard past the daemon's file size limit fails with EFBIG; the daemon serves on"
