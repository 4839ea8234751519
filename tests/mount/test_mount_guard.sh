#!/usr/bin/env bash
# test_mount_guard.sh - a daemon killed with kill -9 leaves no stage
# running. Stages lead sessions of their own, so no signal of the
# daemon's reaches them; the guard (pipeline/job_guard.c, one process the
# daemon started) reads end of file when the daemon dies and kills each
# session it holds. The stage here sleeps with a child in its process
# group and another that moved to a group of its own in the session;
# once the daemon is killed all three, the guard too, are gone within a
# bounded wait, and a new daemon on the store computes the shard.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

p=$tmp/p
mkdir -p "$p/in"
echo x >"$p/in/a.txt"
cat >"$p/slow.yaml" <<'YAML'
name: slow
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'if [ -e again ]; then cat; exit; fi; echo $$ >pids; sleep 600 & echo $! >>pids; /usr/bin/python3 -c "import os, time; os.setpgid(0, 0); time.sleep(600)" & echo $! >>pids; wait']
YAML
mnt=$tmp/mnt store=$tmp/store
mount_fs "$mnt" "$store" "$p"
wait_for 10 test -L "$mnt/slow" || fail "slow is not registered"
cat "$mnt/slow/shard-00000" >/dev/null 2>&1 &
reader=$!
three() { [ -f "$p/pids" ] && [ "$(wc -l <"$p/pids")" -eq 3 ]; }
wait_for 20 three || fail "the stage did not start its children"
mapfile -t pids <"$p/pids"
trap 'kill -9 "${pids[@]}" 2>/dev/null; cleanup' EXIT
pgid() { ps -o pgid= -p "$1" | tr -d ' '; }
[ "$(pgid "${pids[2]}")" = "${pids[2]}" ] || fail "the python child did not leave the stage's group"
guard=$(pgrep -P "$mpid" -x matfs-guard) || fail "no guard runs under the daemon"
for pid in "${pids[@]}"; do kill -0 "$pid" || fail "stage process $pid is not running"; done

kill -9 "$mpid"
wait "$mpid" 2>/dev/null
gone() { local pid; for pid in "${pids[@]}"; do ! kill -0 "$pid" 2>/dev/null || return 1; done; }
wait_for 10 gone || fail "stage processes still run 10 s after the daemon died: $(ps -o pid=,pgid=,sid=,comm= -p "$(IFS=,; echo "${pids[*]}")")"
wait_for 10 pid_gone "$guard" || fail "the guard $guard still runs"
# the killed job's MATFS_INPUTS_FILE folder is left to the cleaning of
# /tmp (docs/decisions.md); this test's own goes now
grep -lsF "$p/in/a.txt" /tmp/matfs-inputs-*/inputs | xargs -r dirname | xargs -r rm -rf
pass "a daemon killed with kill -9 leaves no stage behind (the stage, a child in its group, one in a group of its own)"

wait "$reader" 2>/dev/null
fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
touch "$p/again"
mount_fs "$mnt" "$store" "$p"
wait_for 10 test -L "$mnt/slow" || fail "slow is not registered after the restart"
[ "$(cat "$mnt/slow/shard-00000")" = x ] || fail "the shard after the restart"
pass "a new daemon computes the shard"
umount_fs "$mnt" "$mpid"
