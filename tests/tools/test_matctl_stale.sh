#!/usr/bin/env bash
# test_matctl_stale.sh - a snapshot that can no longer be computed (its
# input changed: the spec now gives another fingerprint) says so in
# `matctl stat` (table and JSON), and `matctl rm` of it keeps its data and
# wants --force, while a snapshot that can be computed again is removed as
# before.
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
tmp=$(mktemp -d /tmp/mf-stale.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
m() { "$matctl" --store "$tmp/store" "$@"; }

mkdir -p "$tmp/p/in"
echo one >"$tmp/p/in/a.txt"
printf 'name: s\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$tmp/p/s.yaml"
old=$(m fingerprint "$tmp/p/s.yaml") || fail "fingerprint"
m warm "$tmp/p/s.yaml" >/dev/null || fail "warm"
m stat "$old" | grep -qx "computable   yes" || fail "stat of a computable snapshot: $(m stat "$old")"

echo two >>"$tmp/p/in/a.txt"
new=$(m fingerprint "$tmp/p/s.yaml") || fail "fingerprint after the edit"
[ "$new" != "$old" ] || fail "the input's change kept the fingerprint"
out=$(m stat "$old") || fail "stat of the old snapshot"
grep -q "^computable   no: its spec '$tmp/p/s.yaml' now gives fingerprint ${new:0:12}" <<<"$out" ||
  fail "stat does not say it can no longer be computed: $out"
m stat "$old" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)["snapshot"]
assert s["computable"] is False and "now gives fingerprint" in s["not_computable_why"], s
' || fail "stat --json"
pass "stat says a snapshot whose input changed can no longer be computed"

out=$(m rm "$old" 2>&1) && fail "rm of the only copy succeeded: $out"
grep -q "can no longer be computed.*matctl rm --force" <<<"$out" || fail "rm says: $out"
[ "$(m cat "$old" 0)" = one ] || fail "the refused rm removed data"
m rm --force "$old" >/dev/null || fail "rm --force"
out=$(m stat "$old" 2>&1)
grep -q "0/1 materialized\|no snapshot" <<<"$out" || fail "rm --force kept the data: $out"
pass "rm of a snapshot that cannot be computed again wants --force"

m warm "$tmp/p/s.yaml" >/dev/null || fail "warm of the new one"
m rm "$new" >/dev/null || fail "rm of a computable snapshot"
pass "rm of a computable snapshot needs no --force"
