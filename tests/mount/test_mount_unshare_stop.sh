#!/usr/bin/env bash
# test_mount_unshare_stop.sh - a daemon whose mount left its namespace
# (unmounted here, a copy elsewhere) and whose connection cannot be aborted
# (fusectl read-only: a daemon without the right to write it) ends its
# session on SIGTERM to itself, and then must not unmount its mount point:
# by then the point may hold another mount, which libfuse's unmount (a lazy
# umount of whatever is there) took away before. Runs in a mount namespace
# of its own, where fusectl is made read-only without touching the host's.
if [ -z "${MF_UNSHARE_INNER:-}" ]; then
  command -v unshare >/dev/null || { echo "skip: no unshare"; exit 77; }
  unshare -m --propagation private true 2>/dev/null ||
    { echo "skip: cannot make a mount namespace (unshare -m)"; exit 77; }
  MF_UNSHARE_INNER=1 exec unshare -m --propagation private bash "$0" "$@"
fi
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

ctl=/sys/fs/fuse/connections
grep -q " $ctl fusectl" /proc/self/mounts ||
  mount -t fusectl fusectl "$ctl" 2>/dev/null ||
  { echo "skip: cannot mount fusectl"; exit 77; }
mount -o remount,ro "$ctl" || { echo "skip: cannot make fusectl read-only"; exit 77; }

p=$tmp/p
mkdir -p "$p/in"
printf 'x\n' >"$p/in/a.txt"
printf 'name: s\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$p/s.yaml"
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 10 test -L "$mnt/s" || fail "s is not registered"
[ "$(cat "$mnt/s/shard-00000")" = x ] || fail "first read"

unshare -m --propagation private sleep 600 &
holder=$!
daemons+=("$holder") # cleanup kills and reaps it whatever happens
copied() { grep -q " $mnt fuse" "/proc/$holder/mounts"; }
wait_for 10 copied || fail "the child's namespace has no copy of the mount"

# unmounted here, and at once another mount on the same point (within the
# daemon's grace of a second before it ends the session)
fusermount3 -u "$mnt" || fail "fusermount3 -u"
mount -t tmpfs -o size=1m other "$mnt" || fail "tmpfs on the mount point"
mounts=("$mnt" "${mounts[@]}") # unmounted by cleanup too
echo mine >"$mnt/f"
wait_for 30 pid_gone "$mpid" ||
  fail "matfs still runs 30 s after its unmount, with a copy elsewhere"
wait "$mpid" || fail "matfs exited $? after its unmount"
grep -q 'connection not aborted' "$log" ||
  fail "the session did not end by the SIGTERM fallback: $(tail -3 "$log")"
grep -q " $mnt tmpfs" /proc/self/mounts ||
  fail "the daemon unmounted the mount that took its place"
[ "$(cat "$mnt/f")" = mine ] || fail "the other mount's file"
! grep -Eq 'runtime error|Sanitizer' "$log" || fail "a sanitizer reported"
pass "ended by SIGTERM after its mount left: the mount that took its place stays"
umount "$mnt"
