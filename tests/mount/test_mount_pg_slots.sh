#!/usr/bin/env bash
# test_mount_pg_slots.sh - the daemon's sessions on PostgreSQL, and a
# server whose max_connections are used up. Six shards read at once open
# several catalog connections; idle, the pool shrinks to one (with the
# liveness session and the listener, at most 3 sessions stay). Then other
# clients take every slot left: a materialized shard still reads, one new
# computation runs on the connection the pool kept, and another waits
# with a bounded, logged retry, then fails with EUSERS ("Too many
# users") and a log line
# naming max_connections (never hangs); once slots are free again both
# compute. Run inside tests/catalog/pg_server.sh (MF_PG_URL, MF_PG_ADMIN;
# skips, 77, without it or without FUSE).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ -n "${MF_PG_URL:-}" ] || { echo "skip: no MF_PG_URL (run inside pg_server.sh)"; exit 77; }

admin() { psql -X -Atq "$MF_PG_ADMIN" -c "$1"; }
admin "ALTER SYSTEM SET max_connections = 16" || fail "setting max_connections"
"$MF_PG_SERVER" restart || fail "restarting PostgreSQL"
[ "$(admin 'SHOW max_connections')" = 16 ] || fail "max_connections is $(admin 'SHOW max_connections')"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1 2 3 4 5 6 7; do printf 'line %d\n' "$k" >"$pipes/in/$k.txt"; done
cat >"$pipes/up.yaml" <<'YAML'
name: up
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'while [ -e slow-$MATFS_SHARD ]; do sleep 0.1; done; sleep 0.3; tr a-z A-Z']
YAML
sessions() { admin "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'matfs'"; }
shard() { printf '%s/up/shard-%05d' "$mnt" "$1"; }

mount_fs "$mnt" "$store" "$pipes" --catalog "$MF_PG_URL" -o workers=8
wait_for 10 test -L "$mnt/up" || fail "up not registered"
pids=()
for k in 0 1 2 3 4 5; do cat "$(shard "$k")" >"$tmp/r$k" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a reader failed"; done
for k in 0 1 2 3 4 5; do
  [ "$(cat "$tmp/r$k")" = "LINE $k" ] || fail "shard $k: $(cat "$tmp/r$k")"
done
busy=$(sessions)
wait_for 90 eval '[ "$(sessions)" -le 3 ]' ||
  fail "the daemon keeps $(sessions) sessions idle (was $busy at work)"
pass "six shards at once: $busy sessions; idle, the pool shrank ($(sessions) left)"

# every slot a non-superuser may take, taken
sleepers=()
for i in $(seq 1 16); do
  psql -X -Atq "$MF_PG_URL" -c "SELECT pg_sleep(600)" >/dev/null 2>"$tmp/sleeper$i" &
  sleepers+=($!)
done
full() {
  local out
  out=$(psql -X -Atq "$MF_PG_URL" -c "SELECT 1" 2>&1)
  case $out in *"too many clients"* | *"slots are reserved"*) return 0 ;; esac
  return 1
}
wait_for 30 full || fail "the server's slots are not used up"
stop_sleepers() {
  local p
  # a backend in pg_sleep does not notice its client leave: end them
  admin "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
    WHERE query = 'SELECT pg_sleep(600)'" >/dev/null
  for p in "${sleepers[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${sleepers[@]}"; do wait "$p" 2>/dev/null; done
  sleepers=()
}
trap 'stop_sleepers; cleanup' EXIT

[ "$(cat "$(shard 0)")" = "LINE 0" ] || fail "materialized shard 0 with the slots used up"
: >"$pipes/slow-6"
: >"$pipes/slow-7"
t0=$(now_ms)
for k in 6 7; do
  (cat "$(shard "$k")" >"$tmp/r$k" 2>"$tmp/e$k" || : >"$tmp/f$k") &
  eval "r$k=\$!"
done
# one computes on the connection the pool kept (its stage waits), the
# other finds no connection to be had
one_failed() { [ -e "$tmp/f6" ] || [ -e "$tmp/f7" ]; }
wait_for 90 one_failed || fail "neither new computation ended with the slots used up"
took=$(($(now_ms) - t0))
if [ -e "$tmp/f6" ]; then failed=6 running=7; else failed=7 running=6; fi
[ -e "$tmp/f$running" ] && fail "both new computations failed: $(cat "$tmp/e6" "$tmp/e7")"
grep -q 'Too many users' "$tmp/e$failed" || fail "not EUSERS: $(cat "$tmp/e$failed")"
grep -q "refuses new connections (max_connections in use): waiting" "$log" ||
  fail "no log line says the open waits for a connection"
grep -q "shard $failed of up .*refused new connections for 30 s (its max_connections are in use" "$log" ||
  fail "no log line names max_connections"
[ "$(cat "$(shard 1)")" = "LINE 1" ] || fail "materialized shard 1 with the slots used up"
pass "slots used up: materialized shards read; shard $running computes, shard $failed failed with EUSERS after $took ms, logged"

stop_sleepers
rm "$pipes/slow-$failed"
[ "$(cat "$(shard "$failed")")" = "LINE $failed" ] || fail "shard $failed once slots are free"
rm "$pipes/slow-$running"
wait "$r6" "$r7"
[ -e "$tmp/f$running" ] && fail "shard $running: $(cat "$tmp/e$running")"
[ "$(cat "$tmp/r$running")" = "LINE $running" ] || fail "shard $running: $(cat "$tmp/r$running")"
pass "slots free again: shards 6 and 7 computed"

umount_fs "$mnt" "$mpid"
pass "unmounted"
