#!/usr/bin/env bash
# test_matctl_hosts.sh - matctl ls names the hosts whose runs hold each
# snapshot's shards: a shard computed under another host name (a UTS
# namespace of its own, as another machine would be) and one computed
# here show both names, sorted, in the table's last column and in JSON.
# On the catalog MF_TEST_CATALOG_LOCATION when set (a PostgreSQL server
# from tests/catalog/pg_server.sh), else the store's SQLite catalog.
# Skips (77) when it cannot make a UTS namespace.
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
tmp=$(mktemp -d /tmp/mf-hosts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
cat_args=()
[ -n "${MF_TEST_CATALOG_LOCATION:-}" ] && cat_args=(--catalog "$MF_TEST_CATALOG_LOCATION")
m() { "$matctl" --store "$tmp/store" "${cat_args[@]}" "$@"; }
unshare --uts true 2>/dev/null || { echo "skip: no UTS namespace"; exit 77; }
other=mf-other-host
# on: the other host (a UTS namespace named $other)
on_other() { unshare --uts sh -c 'hostname "$0" && exec "$@"' "$other" "$matctl" \
  --store "$tmp/store" "${cat_args[@]}" "$@"; }

mkdir -p "$tmp/p/in"
echo alpha >"$tmp/p/in/a.txt"
echo beta >"$tmp/p/in/b.txt"
# shard 1 fails on the other host, so that this one computes it
name=hosts-$$-$RANDOM
cat >"$tmp/p/$name.yaml" <<YAML
name: $name
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, '[ "\$(uname -n)" = $other ] && [ "\$MATFS_SHARD" = 1 ] && exit 3; cat']
YAML
on_other warm "$tmp/p/$name.yaml" >"$tmp/warm.out" 2>&1 &&
  fail "warm on $other should fail shard 1: $(cat "$tmp/warm.out")"
m ls >"$tmp/ls1" || fail "ls: $(cat "$tmp/ls1")"
row=$(grep "^$name " "$tmp/ls1") || fail "ls lists no $name: $(cat "$tmp/ls1")"
set -- $row
[ "$3" = 1/2 ] && [ "${!#}" = "$other" ] || fail "ls row after the other host: '$row'"
m cat "$name" 1 >"$tmp/got1" || fail "cat shard 1 here"
echo beta | cmp -s - "$tmp/got1" || fail "shard 1 bytes"
m ls >"$tmp/ls2" || fail "ls"
want_hosts=$(printf '%s\n' "$other" "$(uname -n)" | sort | paste -sd,)
printf '%-20s %-12s %9s %10s %10s %-10s %-8s %s\n' NAME FINGERPRINT SHARDS \
  STORED RAW LAST-READ EXPIRES HOSTS >"$tmp/head"
head -n 1 "$tmp/ls2" | cmp -s - "$tmp/head" ||
  fail "ls header: '$(head -n 1 "$tmp/ls2")'"
[ "$(head -n 1 "$tmp/ls2")" = "NAME                 FINGERPRINT     SHARDS     STORED        RAW LAST-READ  EXPIRES  HOSTS" ] ||
  fail "ls header bytes: '$(head -n 1 "$tmp/ls2")'"
row=$(grep "^$name " "$tmp/ls2")
set -- $row
[ "$3" = 2/2 ] && [ "${!#}" = "$want_hosts" ] || fail "ls row: '$row', want hosts $want_hosts"
# the EXPIRES column keeps its width: the hosts start at one column
col=$(head -n 1 "$tmp/ls2" | awk '{ print index($0, "HOSTS") }')
[ "${row:$((col - 1))}" = "$want_hosts" ] || fail "hosts not under HOSTS: '$row'"
m ls --json | /usr/bin/python3 -c '
import json, sys
name, hosts = sys.argv[1], sys.argv[2].split(",")
v = [s for s in json.load(sys.stdin) if s["name"] == name]
assert len(v) == 1 and v[0]["hosts"] == hosts, v
' "$name" "$want_hosts" || fail "ls --json hosts"
pass "ls names each snapshot's hosts, table and JSON"
