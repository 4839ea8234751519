#!/usr/bin/env bash
# test_mount_interrupt.sh - a reader waiting for a stage that never ends:
# killing it ends its wait at once; the computation goes on while another
# reader waits for it, and is stopped (its processes killed, the shard
# back to absent, no failure recorded) once nobody has waited for it for
# the grace period; unmounting (fusermount3 -u) or stopping the daemon
# (SIGTERM) while a stage hangs completes and leaves no stage process.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'input\n' >"$pipes/in/0.txt"
# hang: each run appends its pid to pids, then waits for the file go
cat >"$pipes/hang.yaml" <<'YAML'
name: hang
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo $$ >>pids; while [ ! -e go ]; do sleep 0.1; done; cat']
YAML
grace=5 # MFS_CANCEL_GRACE_S in fs/fuse/fuse_i.h

# stages left by a failed test are killed with everything else
kill_stages() {
  local p
  [ -f "$pipes/pids" ] || return 0
  for p in $(cat "$pipes/pids"); do kill -9 "$p" 2>/dev/null; done
}
trap 'kill_stages; cleanup' EXIT

alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }
dead() { ! alive "$1"; }
runs() { [ -f "$pipes/pids" ] && wc -l <"$pipes/pids" || echo 0; }
last_pid() { tail -n 1 "$pipes/pids"; }
started() { [ "$(runs)" -ge "$1" ] && alive "$(last_pid)"; }
gone_proc() { ! kill -0 "$1" 2>/dev/null; }
# in_open PID: PID is in openat(2) (waiting for the daemon, or about to);
# where its number is unknown, after a second
case $(uname -m) in x86_64) openat=257 ;; aarch64) openat=56 ;; *) openat= ;; esac
in_open() {
  [ -n "$openat" ] || { sleep 1; return 0; }
  [ "$(cut -d ' ' -f 1 "/proc/$1/syscall")" = "$openat" ]
}
s=$mnt/hang/shard-00000

mount_fs "$mnt" "$store" "$pipes"

# --- a killed reader goes at once; with nobody waiting the stage stops ---
cat "$s" >/dev/null 2>&1 &
c1=$!
wait_for 10 started 1 || fail "the stage did not start"
stage=$(last_pid)
kill "$c1"
wait_for 5 gone_proc "$c1" || fail "a killed reader kept waiting"
wait "$c1" 2>/dev/null
wait_for $((grace + 10)) dead "$stage" || fail "the stage still runs with no reader"
wait_for 5 eval '[ "$(xattr "$s" state)" = absent ]' || fail "state after the stop: $(xattr "$s" state)"
[ -z "$(xattr "$s" error)" ] || fail "the stop was recorded as a failure: $(xattr "$s" error)"
pass "a killed reader goes at once; the stage stops once nobody waits"

# --- with another reader waiting, the computation goes on for it ---
cat "$s" >"$tmp/b1" 2>&1 &
c1=$!
wait_for 10 started 2 || fail "the stage did not start again"
stage=$(last_pid)
cat "$s" >"$tmp/b2" &
c2=$!
wait_for 10 in_open "$c2" || fail "the second reader did not open"
kill "$c1"
wait_for 5 gone_proc "$c1" || fail "a killed reader kept waiting (2)"
wait "$c1" 2>/dev/null
sleep $((grace + 1))
alive "$stage" || fail "the stage was stopped while a reader waited"
touch "$pipes/go"
wait "$c2" || fail "the remaining reader failed"
cmp "$tmp/b2" "$pipes/in/0.txt" || fail "the remaining reader's bytes"
[ "$(runs)" -eq 2 ] || fail "$(runs) runs, want 2"
rm "$pipes/go" "$s"
pass "the computation goes on for the readers left"

# --- fusermount3 -u while a stage hangs ---
cat "$s" >/dev/null 2>&1 &
c1=$!
wait_for 10 started 3 || fail "the stage did not start (3)"
stage=$(last_pid)
kill "$c1"
wait_for 5 gone_proc "$c1" || fail "a killed reader kept waiting (3)"
wait "$c1" 2>/dev/null
umount_fs "$mnt" "$mpid"
dead "$stage" || fail "a stage outlived the unmount"
pass "fusermount3 -u while a stage hangs: the daemon exits, no stage left"

# --- the daemon stopped (SIGTERM) while a reader waits for a stage ---
mount_fs "$mnt" "$store" "$pipes"
cat "$s" >/dev/null 2>&1 &
c1=$!
wait_for 10 started 4 || fail "the stage did not start (4)"
stage=$(last_pid)
kill "$mpid"
wait_for 10 gone_proc "$mpid" || fail "the daemon did not exit"
wait "$mpid" 2>/dev/null
wait_for 5 gone_proc "$c1" || fail "the reader kept waiting after the daemon left"
wait "$c1" 2>/dev/null && fail "the reader's cat succeeded without a daemon"
dead "$stage" || fail "a stage outlived the daemon"
pass "SIGTERM while a reader waits: the daemon exits, the reader fails, no stage left"

# --- SIGTERM while a process holds a directory and a file of the mount
# open: the daemon frees their handles (no release comes for them) and
# exits 0, which a sanitizer build checks for leaks ---
touch "$pipes/go" # hang's shard completes now
mount_fs "$mnt" "$store" "$pipes"
wait_for 10 test -L "$mnt/hang" || fail "hang is not registered (SIGTERM with handles)"
cat "$s" >/dev/null || fail "reading hang's shard before the stop"
"$py" -c '
import os, sys, time
d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
os.listdir(d)
f = os.open(sys.argv[2], os.O_RDONLY)
os.read(f, 1)
open(sys.argv[3], "w").close()
time.sleep(60)' "$mnt/hang/" "$s" "$tmp/holding" &
holder=$!
wait_for 10 test -e "$tmp/holding" || fail "the holder did not open its handles"
kill "$mpid"
wait_for 10 gone_proc "$mpid" || fail "the daemon did not exit with handles open"
wait "$mpid"
rc=$?
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
[ "$rc" = 0 ] || fail "the daemon stopped with handles open exited $rc"
pass "SIGTERM with a directory and a file held open: the daemon exits 0"
