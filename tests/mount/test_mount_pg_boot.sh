#!/usr/bin/env bash
# test_mount_pg_boot.sh - a daemon started while its PostgreSQL catalog is
# down (a boot where the server comes up after the mount): it waits and
# tries again, saying so once in its log, and mounts once the server
# answers; every line of its log file names its host. Run inside
# tests/catalog/pg_server.sh (MF_PG_URL; skips, 77, without it or
# without FUSE).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ -n "${MF_PG_URL:-}" ] || { echo "skip: no MF_PG_URL (run inside pg_server.sh)"; exit 77; }

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$mnt"
printf 'line one\n' >"$pipes/in/a.txt"
cat >"$pipes/up.yaml" <<'YAML'
name: up
inputs: in/*.txt
stages:
  - exec: [tr, a-z, A-Z]
YAML

"$MF_PG_SERVER" stop || fail "stopping PostgreSQL"
flog=$tmp/file.log
"$matfs" --store "$store" --pipelines "$pipes" --catalog "$MF_PG_URL" -f \
  -o "log=$flog" "$mnt" >>"$log" 2>&1 &
mpid=$!
daemons+=("$mpid")
mounts+=("$mnt")
wait_for 20 grep -q "catalog '.*' unreachable (.*): trying again for up to 60 s" "$flog" ||
  { kill -0 "$mpid" 2>/dev/null || fail "matfs exited with the server down: $(cat "$log")"; fail "no log line says it waits for the catalog"; }
sleep 2
kill -0 "$mpid" 2>/dev/null || fail "matfs exited while it waited: $(cat "$log")"
is_mounted "$mnt" && fail "mounted before the catalog answered"
pass "the server down at start: matfs waits, and says so"

"$MF_PG_SERVER" start || fail "starting PostgreSQL"
wait_for 30 is_mounted "$mnt" || fail "matfs did not mount once the server answered"
wait_for 10 test -L "$mnt/up" || fail "up not registered"
[ "$(cat "$mnt/up/shard-00000")" = "LINE ONE" ] || fail "shard 0's bytes"
grep -q "catalog '.*' answers: starting" "$flog" || fail "no log line says the catalog answered"
[ "$(grep -c "unreachable (.*): trying again" "$flog")" -eq 1 ] || fail "the wait logged more than once"
host=$(hostname)
bad=$(grep -v "^[^ ]* $host matfs\[$mpid\] " "$flog")
[ -z "$bad" ] || fail "log lines without the host name: $bad"
pass "the server up: mounted, registered, computed; every log line names host $host"

umount_fs "$mnt" "$mpid"
pass "unmounted"
