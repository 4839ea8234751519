#!/usr/bin/env bash
# test_mount_log.sh - the daemon's log is never lost, and its counters:
# in a mount namespace of its own (unshare -m) where /dev is a tmpfs with
# no /dev/log, a daemon in the background logs to STORE/matfs.log (0640,
# lines naming the pipeline, a failed stage's last stderr line), which
# `matctl log` shows; -o log=FILE refuses a planted symlink; the file is
# rotated past -o log_size and `matctl log -f` follows it across the
# rotation; with a /dev/log socket the daemon uses syslog instead; and
# `matctl stats` (text, --json, --prometheus) reads the mounted daemon's
# counters and, unmounted, the catalog's totals.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

if [ "${1:-}" != inner ]; then
  [ "$(id -u)" -eq 0 ] || { echo "skip: needs root for unshare -m"; exit 77; }
  unshare -m --propagation private true 2>/dev/null ||
    { echo "skip: unshare -m does not work here"; exit 77; }
  unshare -m --propagation private bash "$0" inner
  exit $?
fi

# This namespace holds a copy of every mount there was, the FUSE mounts
# of tests running beside this one included: a copy keeps such a mount
# alive after its own test unmounts it, and its daemon waits. Detach them.
awk '$3 ~ /^fuse/ { print $2 }' /proc/self/mounts | while read -r m; do
  umount -l "$(printf '%b' "$m")" 2>/dev/null
done

# --- a /dev without /dev/log, in this mount namespace only ---
olddev=$(mktemp -d /tmp/mf-olddev.XXXXXX)
mount --bind /dev "$olddev" || fail "bind /dev"
mount -t tmpfs -o mode=755 none /dev || { umount "$olddev"; fail "tmpfs /dev"; }
for n in null zero full random urandom fuse; do
  touch "/dev/$n" && mount --bind "$olddev/$n" "/dev/$n"
done
umount "$olddev" && rmdir "$olddev"
ln -s /proc/self/fd /dev/fd
[ -e /dev/log ] && fail "/dev/log still there"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$mnt"
printf 'payload\n' >"$pipes/in/a.txt"
printf 'name: plain\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$pipes/plain.yaml"
cat >"$pipes/bad.yaml" <<'YAML'
name: broken-stage
inputs: in/*.txt
stages:
  - exec: [sh, -c, 'echo first line >&2; echo no such column text >&2; exit 3']
YAML

# the daemon of this namespace's mount (its pid, for the cleanup)
daemon_of() {
  local p me; me=$(readlink /proc/self/ns/mnt)
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$me" ] &&
      [ "$(readlink "$p/exe" 2>/dev/null)" = "$(readlink -f "$matfs")" ] &&
      echo "${p#/proc/}"
  done
}
bg_mount() { # bg_mount ARGS...: the daemon in the background
  mounts+=("$mnt")
  "$matfs" --store "$store" --pipelines "$pipes" "$@" "$mnt" 2>>"$log" ||
    fail "matfs in the background exited $?"
  local p; for p in $(daemon_of); do daemons+=("$p"); done
}
bg_umount() {
  local p=("$(daemon_of)")
  fusermount3 -u "$mnt" || fail "fusermount3 -u"
  for q in ${p[@]}; do reap "$q"; done
}

# --- background, no /dev/log: STORE/matfs.log ---
# -o nopush: the read below goes through the daemon, whose counters
# matctl stats then shows
bg_mount -o nopush
[ "$(cat "$mnt/plain/shard-00000")" = payload ] || fail "read"
cat "$mnt/broken-stage/shard-00000" 2>/dev/null && fail "a failing stage served"
wait_for 5 grep -q 'broken-stage' "$store/matfs.log" || fail "no failure line: $(cat "$store/matfs.log")"
[ "$(stat -c %a "$store/matfs.log")" = 640 ] || fail "log mode $(stat -c %a "$store/matfs.log")"
grep -E "shard 0 of broken-stage \([0-9a-f]{12}\): stage 0 'sh' exited with status 3: no such column text" \
  "$store/matfs.log" >/dev/null || fail "failure line: $(grep broken "$store/matfs.log")"
grep -q "spec '.*plain.yaml'" "$store/matfs.log" || fail "no registration line"
[ "$(xattr "$mnt" log)" = "$store/matfs.log" ] || fail "user.matfs.log: $(xattr "$mnt" log)"
"$matctl" --store "$store" log >"$tmp/shown" || fail "matctl log exited $?"
cmp -s "$tmp/shown" "$store/matfs.log" || fail "matctl log differs from the file"
pass "background without /dev/log: STORE/matfs.log, 0640, names the pipeline and the stage's last stderr line"

# --- matctl stats on the mounted daemon ---
# the read can end before the commit of what it read (served sealed): the
# catalog counts the shard running until then
catalog_idle() {
  "$matctl" --store "$store" stats --json | "$py" -c '
import json, sys
assert json.load(sys.stdin)["catalog"]["materializations_running"] == 0'
}
wait_for 20 catalog_idle || fail "a shard still running in the catalog 20 s after its read"
"$matctl" --store "$store" stats --json >"$tmp/j" || fail "stats --json exited $?"
"$py" - "$tmp/j" <<'PY' || fail "stats --json: $(cat "$tmp/j")"
import json, sys
s = json.load(open(sys.argv[1]))
d, c = s["daemon"], s["catalog"]
assert s["daemons"] == 1, s
assert d["bytes_served"] == 8, d            # "payload\n"
assert d["bytes_pushed"] == 0, d
assert d["cache_hits"] + d["cache_misses"] >= 1, d
assert d["chunks_decompressed"] + d["chunks_tapped"] >= 1, d
assert d["materializations_started"] == 2, d
assert d["materializations_failed"] == 1, d
assert d["materializations_running"] == 0, d
assert d["stage_seconds"] >= 0, d
assert c["materializations_started"] == 2 and c["materializations_failed"] == 1, c
assert c["materializations_running"] == 0, c
PY
"$matctl" --store "$store" stats "$mnt" --prometheus >"$tmp/prom" || fail "stats --prometheus"
grep -qx 'matfs_bytes_served_total 8' "$tmp/prom" || fail "prometheus: $(cat "$tmp/prom")"
grep -qx '# TYPE matfs_materializations_running gauge' "$tmp/prom" || fail "prometheus types"
! grep -qvE -e '^#' -e '^matfs_[a-z_]+ [0-9.]+$' "$tmp/prom" || fail "not textfile format: $(cat "$tmp/prom")"
stats=$("$matctl" --store "$store" stats) || fail "stats text"
grep -qE 'bytes_served +8$' <<<"$stats" || fail "stats text"
"$matctl" --store "$store" stats --json --prometheus 2>/dev/null; [ $? -eq 2 ] || fail "--json --prometheus accepted"
bg_umount
"$matctl" --store "$store" stats --json >"$tmp/j" || fail "stats unmounted"
"$py" -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["daemons"]==0 and s["daemon"] is None and s["catalog"]["materializations_started"]==2, s' "$tmp/j" ||
  fail "stats without a daemon: $(cat "$tmp/j")"
pass "matctl stats: the mounted daemon's counters (xattrs), then the catalog's totals"

# --- -o log=FILE never follows a planted symlink ---
ln -s "$tmp/target" "$tmp/planted.log"
"$matfs" --store "$store" --pipelines "$pipes" -o log="$tmp/planted.log" "$mnt" 2>"$tmp/err" &&
  fail "a symlinked log file accepted"
grep -q "log '$tmp/planted.log'" "$tmp/err" || fail "message: $(cat "$tmp/err")"
[ -e "$tmp/target" ] && fail "the symlink's target was created"
is_mounted "$mnt" && fail "mounted anyway"
pass "-o log=FILE refuses a symlink (O_NOFOLLOW)"

# --- rotation past log_size, followed by matctl log -f ---
flog=$tmp/logs/m.log
mkdir -p "$tmp/logs"
bg_mount -o "log=$flog,log_size=2KiB"
"$matctl" --store "$store" log -f >"$tmp/followed" 2>&1 &
follower=$!
daemons+=("$follower")
wait_for 5 grep -q 'registered\|spec' "$tmp/followed" || fail "matctl log -f shows nothing: $(cat "$tmp/followed")"
for i in $(seq 1 30); do cat "$mnt/broken-stage/shard-00000" 2>/dev/null; done
wait_for 5 test -e "$flog.1" || fail "not rotated: $(ls -l "$tmp/logs")"
[ "$(stat -c %s "$flog.1")" -lt 4096 ] || fail "rotated late: $(stat -c %s "$flog.1")"
last=$(tail -n 1 "$flog")
wait_for 5 grep -qF "$last" "$tmp/followed" || fail "matctl log -f lost the rotation"
failures_followed() { [ "$(grep -c 'exited with status 3' "$tmp/followed")" -ge 30 ]; }
wait_for 10 failures_followed ||
  fail "matctl log -f missed lines: $(grep -c 'exited with status 3' "$tmp/followed")"
kill "$follower"; wait "$follower" 2>/dev/null
[ -e "$flog.4" ] && fail "more than 3 old files"
bg_umount
pass "the log rotates past log_size (3 old files) and matctl log -f follows it"

# --- with a /dev/log socket: syslog, no file ---
rm -f "$store/matfs.log"
"$py" - <<'PY' >"$tmp/syslog" &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
s.settimeout(20)
try:
    while True:
        print(s.recv(4096).decode(errors="replace"), flush=True)
except socket.timeout:
    pass
PY
listener=$!
daemons+=("$listener")
wait_for 5 test -S /dev/log || fail "no /dev/log socket"
bg_mount
cat "$mnt/broken-stage/shard-00000" 2>/dev/null
wait_for 5 grep -q 'matfs.*broken-stage.*no such column text' "$tmp/syslog" || fail "syslog got: $(cat "$tmp/syslog")"
[ -e "$store/matfs.log" ] && fail "a log file with /dev/log there"
[ "$(xattr "$mnt" log)" = syslog ] || fail "user.matfs.log: $(xattr "$mnt" log)"
"$matctl" --store "$store" log 2>"$tmp/err"; [ $? -eq 1 ] || fail "matctl log with syslog"
grep -q 'logs to syslog' "$tmp/err" || fail "message: $(cat "$tmp/err")"
bg_umount
kill "$listener" 2>/dev/null
pass "with /dev/log the background daemon logs to syslog"
