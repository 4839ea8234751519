#!/usr/bin/env bash
# test_mount_backoff.sh - a stage that always fails is not run on every
# open (docs/guide.md, "When a stage fails"). Ten opens in a row of its
# shard: the first two run it (the second sees the first failure, which may
# be old, and tries again), the other eight answer EIO at once with the same
# error. matctl retry or rm of the shard forgets it: the next open runs
# the stage again.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

p=$tmp/p
mkdir -p "$p/in"
echo x >"$p/in/a.txt"
cat >"$p/f.yaml" <<'YAML'
name: f
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; echo run >>runs; echo "no column text" >&2; exit 3']
YAML
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p" -o nopush
wait_for 10 test -L "$mnt/f" || fail "f is not registered"
shard=$mnt/f/shard-00000
for i in $(seq 1 10); do
  out=$(cat "$shard" 2>&1) && fail "open $i of a failing shard succeeded"
  grep -q "Input/output error" <<<"$out" || fail "open $i: $out"
done
[ "$(calls "$p/runs")" = 2 ] || fail "ten opens ran the failing stage $(calls "$p/runs") times, not 2"
grep -q "no column text" <<<"$(xattr "$shard" stderr)" ||
  fail "the stderr is not the stage's: $(xattr "$shard" stderr)"
pass "a failing shard runs twice, then answers EIO at once"

out=$("$matctl" --store "$tmp/store" retry f) || fail "matctl retry: $out"
grep -q "^1 failed shard of" <<<"$out" || fail "matctl retry says: $out"
cat "$shard" >/dev/null 2>&1 && fail "the failing shard succeeded after retry"
[ "$(calls "$p/runs")" = 3 ] || fail "after matctl retry the stage ran $(calls "$p/runs") times in all, not 3"
pass "matctl retry lets the next open run a failed shard again"

cat "$shard" >/dev/null 2>&1 # the fourth failure: backs off again
[ "$(calls "$p/runs")" = 4 ] || fail "the open after a retry's failure ran $(calls "$p/runs") times in all, not 4"
cat "$shard" >/dev/null 2>&1
[ "$(calls "$p/runs")" = 4 ] || fail "a failure after a retry does not back off"
rm "$shard" || fail "rm of the failed shard"
cat "$shard" >/dev/null 2>&1 && fail "the failing shard succeeded after rm"
[ "$(calls "$p/runs")" = 5 ] || fail "after rm the stage ran $(calls "$p/runs") times in all, not 5"
pass "rm of a failed shard lets the next open run it again"
umount_fs "$mnt" "$mpid"
