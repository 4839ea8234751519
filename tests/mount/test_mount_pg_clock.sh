#!/usr/bin/env bash
# test_mount_pg_clock.sh - on a PostgreSQL catalog every time the catalog
# compares is the server's: a daemon whose host clock is an hour behind
# (the test hook MF_TEST_CLOCK_SHIFT_S shifts its wall clock) registers
# and reads a snapshot with expire_after: 1h; the snapshot's created and
# last-read times and the shard's last read are the server's now(), and a
# matctl whose clock is two hours ahead expires nothing (it asks the
# server what time it is). Run inside tests/catalog/pg_server.sh
# (MF_PG_URL, MF_PG_ADMIN; skips, 77, without it or without FUSE).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ -n "${MF_PG_URL:-}" ] || { echo "skip: no MF_PG_URL (run inside pg_server.sh)"; exit 77; }

admin() { psql -X -Atq "$MF_PG_ADMIN" -c "$1"; }
store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'line one\n' >"$pipes/in/a.txt"
cat >"$pipes/up.yaml" <<'YAML'
name: up
inputs: in/*.txt
expire_after: 1h
stages:
  - exec: [tr, a-z, A-Z]
YAML

export MF_TEST_CLOCK_SHIFT_S=-3600 # this host's clock, an hour behind
mount_fs "$mnt" "$store" "$pipes" --catalog "$MF_PG_URL"
unset MF_TEST_CLOCK_SHIFT_S
wait_for 10 test -L "$mnt/up" || fail "up not registered"
[ "$(cat "$mnt/up/shard-00000")" = "LINE ONE" ] || fail "shard 0's bytes"
wait_for 10 eval '[ "$(admin "SELECT last_read FROM matfs.shards WHERE idx = 0")" -gt 0 ]' ||
  fail "shard 0's last read not recorded"

now=$(admin "SELECT extract(epoch FROM now())::bigint")
# near: within 10 minutes of the server's now (an hour off fails)
near() { [ "$1" -gt $((now - 600)) ] && [ "$1" -le $((now + 5)) ]; }
row=$(admin "SELECT created, last_read FROM matfs.snapshots")
created=${row%%|*} last=${row##*|}
shard_last=$(admin "SELECT last_read FROM matfs.shards WHERE idx = 0")
near "$created" || fail "the snapshot's created is $((created - now)) s from the server's now"
near "$last" || fail "the snapshot's last read is $((last - now)) s from the server's now"
near "$shard_last" || fail "shard 0's last read is $((shard_last - now)) s from the server's now"
pass "a host an hour behind: created and last-read times are the server's ($((created - now)), $((last - now)), $((shard_last - now)) s)"

out=$(MF_TEST_CLOCK_SHIFT_S=7200 "$matctl" --store "$store" --catalog "$MF_PG_URL" expire 2>&1) ||
  fail "matctl expire: $out"
[ "$(xattr "$mnt/up/shard-00000" state)" = materialized ] ||
  fail "a matctl two hours ahead expired shard 0 ($(xattr "$mnt/up/shard-00000" state)): $out"
[ "$(cat "$mnt/up/shard-00000")" = "LINE ONE" ] || fail "shard 0 after matctl expire"
pass "a matctl two hours ahead expires nothing read a moment ago"

umount_fs "$mnt" "$mpid"
pass "unmounted"
