#!/usr/bin/env bash
# test_mount_unshare.sh - a daemon whose mount was copied into another
# mount namespace (unshare -m, as containers and systemd's private mounts
# do) exits 0 after `fusermount3 -u` here: the copy keeps the kernel's
# connection alive, so the session would never end (the daemon ran on for
# ever before). The mount table changing here otherwise (a tmpfs mounted
# and unmounted) and the copy being made end nothing; once the daemon is
# gone, the copy answers ENOTCONN, as after any end of a daemon.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
command -v unshare >/dev/null || { echo "skip: no unshare"; exit 77; }
unshare -m --propagation private true 2>/dev/null ||
  { echo "skip: cannot make a mount namespace (unshare -m)"; exit 77; }

p=$tmp/p
mkdir -p "$p/in"
printf 'x\n' >"$p/in/a.txt"
printf 'name: s\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$p/s.yaml"
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 10 test -L "$mnt/s" || fail "s is not registered"
[ "$(cat "$mnt/s/shard-00000")" = x ] || fail "first read"

# --- a copy of the mount in another namespace, held by a sleeping child ---
unshare -m --propagation private sleep 600 &
holder=$!
daemons+=("$holder") # cleanup kills and reaps it whatever happens
# its own namespace first: until unshare(2) ran, the child's mounts are
# ours, the mount included
own_ns() { [ "$(readlink "/proc/$holder/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]; }
wait_for 10 own_ns || fail "the child shares our mount namespace"
copied() { grep -q " $mnt fuse" "/proc/$holder/mounts"; }
wait_for 10 copied || fail "the child's namespace has no copy of the mount"

# other changes of our mount table end nothing
mkdir -p "$tmp/t"
mount -t tmpfs none "$tmp/t" && umount "$tmp/t" || fail "tmpfs mount"
sleep 1.5 # past the daemon's grace after a change
kill -0 "$mpid" 2>/dev/null || fail "the daemon exited while still mounted here"
[ "$(cat "$mnt/s/shard-00000")" = x ] || fail "read with a copy elsewhere"
pass "a copy in another namespace and other mount changes end nothing"

# --- unmounted here: the daemon exits 0, the child still runs ---
fusermount3 -u "$mnt" || fail "fusermount3 -u"
is_mounted "$mnt" && fail "still mounted here after fusermount3 -u"
copied || fail "the copy went with the unmount here"
# a sanitizer build on a loaded machine takes seconds to stop
wait_for 30 pid_gone "$mpid" ||
  fail "matfs still runs 30 s after its unmount, with a copy elsewhere"
wait "$mpid" || fail "matfs exited $? after its unmount"
kill -0 "$holder" 2>/dev/null || fail "the child holding the copy is gone"
grep -q 'the mount left this mount namespace' "$log" ||
  fail "no log line for the end of the session"
! grep -Eq 'runtime error|Sanitizer' "$log" || fail "a sanitizer reported"
pass "unmounted here with a copy elsewhere: the daemon exits 0"

if command -v nsenter >/dev/null; then
  out=$(nsenter -t "$holder" -m stat "$mnt" 2>&1) &&
    fail "the copy still answers with no daemon: $out"
  [[ $out == *"not connected"* ]] || fail "the copy: $out"
  pass "the copy elsewhere answers ENOTCONN"
fi
