#!/usr/bin/env bash
# test_mount_pg_respec.sh - a spec edited while the PostgreSQL catalog is
# down: its registration cannot be recorded, which the log says once, and
# it is registered again once the server answers, without another edit:
# the name then points at the new fingerprint and its shards compute the
# new bytes. Run inside tests/catalog/pg_server.sh (MF_PG_URL; skips, 77,
# without it or without FUSE).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ -n "${MF_PG_URL:-}" ] || { echo "skip: no MF_PG_URL (run inside pg_server.sh)"; exit 77; }

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'line one\nline two\n' >"$pipes/in/a.txt"
# spec STAGE: pipeline "up", one shard, the stage run by /bin/sh -c
spec() {
  cat >"$pipes/up.yaml.new" <<YAML
name: up
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, '$1']
YAML
  mv "$pipes/up.yaml.new" "$pipes/up.yaml"
}
spec 'tr a-z A-Z'
mount_fs "$mnt" "$store" "$pipes" --catalog "$MF_PG_URL"
wait_for 10 test -L "$mnt/up" || fail "up not registered"
fp1=$(readlink "$mnt/up")
pass "registered: up -> $fp1"

"$MF_PG_SERVER" stop || fail "stopping PostgreSQL"
spec 'tr a-z A-Z; echo edited'
wait_for 20 grep -q "up.yaml.*catalog .* unreachable\|spec skipped" "$log" ||
  fail "no log line says the edited spec could not be registered"
sleep 2 # retries while the server is down
n=$(grep -c "up.yaml.*catalog .* unreachable\|spec skipped" "$log")
[ "$n" -eq 1 ] || fail "the outage logged $n times, not once"
pass "the server down: the edit is not registered, and the log says so once"

"$MF_PG_SERVER" start || fail "starting PostgreSQL again"
fp2=$("$matctl" --store "$store" --catalog "$MF_PG_URL" fingerprint "$pipes/up.yaml") ||
  fail "matctl fingerprint"
[ "$fp2" != "$fp1" ] || fail "the edit did not change the fingerprint"
wait_for 30 eval '[ "$(readlink "$mnt/up" 2>/dev/null)" = "$fp2" ]' ||
  fail "the spec edited during the outage was never registered: up -> $(readlink "$mnt/up")"
grep -q "up.yaml.*registered, the catalog answers again" "$log" ||
  fail "no log line says the spec was registered after the outage"
got=$(cat "$mnt/up/shard-00000") || fail "reading shard 0"
[ "$got" = "$(printf 'LINE ONE\nLINE TWO\nedited')" ] || fail "shard 0 of the edit: $got"
pass "the server back: up -> the edit's fingerprint, without another edit; its bytes"

umount_fs "$mnt" "$mpid"
pass "unmounted"
