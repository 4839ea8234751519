#!/usr/bin/env bash
# test_mount_signals.sh - every signal that would kill the daemon by
# default is handled on purpose (matfs(8), SIGNALS). SIGUSR1, SIGUSR2,
# SIGALRM, SIGVTALRM, SIGPWR and a real-time signal, sent while a shard is
# computed, change nothing: the daemon serves on and the read gets its
# bytes (each left the mount ENOTCONN and the stages orphaned before).
# SIGHUP stops it as an unmount does: exit 0, unmounted, no stage left
# (but one ignored at start, as under nohup, stays ignored);
# SIGXCPU the same. SIGTSTP, SIGTTIN and SIGTTOU stop nothing.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

p=$tmp/p
mkdir -p "$p/in"
printf 'x\n' >"$p/in/a.txt"
cat >"$p/s.yaml" <<'YAML'
name: s
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo $$ >"$0.pid"; until [ -e GO ]; do sleep 0.05; done; cat', stage]
YAML
mnt=$tmp/mnt
# the stop signals at their defaults, whatever this test inherited
# (under nohup SIGHUP comes ignored, and an ignored one stays so: matfs(8))
launch=(env --default-signal=HUP,INT,TERM)
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 10 test -L "$mnt/s" || fail "s is not registered"

cat "$mnt/s/shard-00000" >"$tmp/out" &
reader=$!
wait_for 10 test -s "$p/stage.pid" || fail "the stage did not start"
for sig in USR1 USR2 ALRM VTALRM PWR TSTP TTIN TTOU RTMIN+3 RTMAX; do
  kill -s "$sig" "$mpid" || fail "kill -$sig"
done
sleep 0.3
kill -0 "$mpid" 2>/dev/null || fail "a signal killed the daemon"
grep -q '^State:[[:space:]]*T' "/proc/$mpid/status" && fail "a signal stopped the daemon"
is_mounted "$mnt" || fail "a signal unmounted the daemon"
touch "$p/GO"
wait "$reader" || fail "the read failed after the signals"
[ "$(cat "$tmp/out")" = x ] || fail "the read got '$(cat "$tmp/out")'"
pass "SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPWR, SIGTSTP, SIGTTIN, SIGTTOU and real-time signals are ignored"

# stacks PID: what each thread of a daemon that did not stop waits in
# (for the failure's report; gdb where the machine has it)
stacks() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null): $(cat "$t/wchan" 2>/dev/null)" >&2
  done
  command -v gdb >/dev/null &&
    timeout 30 gdb -batch -p "$1" -ex "thread apply all bt" >&2 2>&1 </dev/null
}

# stops_cleanly SIG: SIG makes the daemon exit 0, unmounted
stops_cleanly() {
  kill -s "$1" "$mpid"
  wait_for 60 pid_gone "$mpid" || { stacks "$mpid"; fail "SIG$1 did not stop the daemon"; }
  wait "$mpid"
  local st=$?
  [ "$st" = 0 ] || fail "the daemon exited $st after SIG$1"
  ! is_mounted "$mnt" || fail "the mount is still there after SIG$1"
}

# SIGHUP during a computation: a clean stop
rm -f "$p/GO" "$p/stage.pid"
printf 'y\n' >"$p/in/b.txt"
wait_for 10 sh -c "[ -e '$mnt/s/shard-00001' ] || ls '$mnt/s' | grep -q 00001" ||
  fail "the new input is not seen"
cat "$mnt/s/shard-00001" >/dev/null 2>&1 &
reader=$!
wait_for 10 test -s "$p/stage.pid" || fail "the second stage did not start"
stage=$(cat "$p/stage.pid")
stops_cleanly HUP
wait_for 10 pid_gone "$stage" || fail "stage $stage runs on after the daemon stopped"
wait "$reader" 2>/dev/null
pass "SIGHUP stops the daemon cleanly: unmounted, exit 0, no stage left"

# SIGXCPU (a CPU time limit reached) stops it as cleanly
mount_fs "$mnt" "$tmp/store" "$p"
stops_cleanly XCPU
pass "SIGXCPU stops the daemon cleanly"

# SIGHUP ignored when the daemon starts (nohup) stays ignored
launch=(env --ignore-signal=HUP)
mount_fs "$mnt" "$tmp/store" "$p"
kill -s HUP "$mpid"
sleep 0.3
kill -0 "$mpid" 2>/dev/null || fail "SIGHUP stopped a daemon started with it ignored"
is_mounted "$mnt" || fail "SIGHUP unmounted a daemon started with it ignored"
umount_fs "$mnt" "$mpid"
pass "a SIGHUP ignored at start (nohup) stays ignored"
