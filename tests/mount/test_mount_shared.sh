#!/usr/bin/env bash
# test_mount_shared.sh - two daemons on one store and catalog (as hosts
# of a cluster are), each with its own pipelines folder, whose specs give
# one name two fingerprints, keep: 1. Each daemon's expiry counts what the
# other registers (its holds in the catalog) as registered: neither takes
# the other's data, while a third fingerprint of the name that no live
# engine holds is expired by keep as on one host.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store
for h in a b; do
  mkdir -p "$tmp/p$h/in"
  printf 'input\n' >"$tmp/p$h/in/0.txt"
done
# spec FOLDER TAG: name "kept", keep: 1, the tag makes the fingerprint
spec() {
  cat >"$1/kept.yaml" <<YAML
name: kept
inputs: in/*.txt
keep: 1
stages:
  - exec: [/bin/sh, -c, 'cat; echo $2']
YAML
}
spec "$tmp/pa" A
spec "$tmp/pb" B
m() { "$matctl" --store "$store" "$@"; }
fA=$(m fingerprint "$tmp/pa/kept.yaml") && fB=$(m fingerprint "$tmp/pb/kept.yaml") ||
  fail "fingerprints"
[ "$fA" != "$fB" ] || fail "one fingerprint for two specs"

mount_fs "$tmp/ma" "$store" "$tmp/pa"; pa=$mpid
mount_fs "$tmp/mb" "$store" "$tmp/pb"; pb=$mpid
wait_for 10 test -L "$tmp/ma/kept" || fail "no name on a"
wait_for 10 test -L "$tmp/mb/kept" || fail "no name on b"
[ "$(cat "$tmp/ma/kept/shard-00000")" = "$(printf 'input\nA')" ] || fail "bytes of A"
sleep 1.1 # B is read later: the more recent of the name
[ "$(cat "$tmp/mb/kept/shard-00000")" = "$(printf 'input\nB')" ] || fail "bytes of B"

materialized() { local out; out=$(m stat "$1" --json 2>/dev/null) && grep -q '"state":"materialized"' <<<"$out"; }
sleep 4 # several expiry passes of both daemons (one a second)
materialized "$fA" || fail "a's fingerprint lost its data: expired by b's keep ($(tail -3 "$log"))"
materialized "$fB" || fail "b's fingerprint lost its data: expired by a's keep ($(tail -3 "$log"))"
pass "keep: 1 on two daemons: neither expires what the other registers"

# a third fingerprint of the name, read once by matctl, held by nobody
mkdir -p "$tmp/pc/in"
printf 'input\n' >"$tmp/pc/in/0.txt"
spec "$tmp/pc" C
fC=$(m fingerprint "$tmp/pc/kept.yaml") || fail "fingerprint of C"
m cat "$tmp/pc/kept.yaml" 0 >/dev/null || fail "matctl cat C"
wait_for 10 eval '! materialized "$fC"' || fail "C, held by nobody, not expired by keep"
materialized "$fA" && materialized "$fB" || fail "A or B expired with C"
grep -q "expired snapshot ${fC:0:12} of kept (keep)" "$log" || fail "no log line for C's expiry"
pass "a fingerprint no live engine holds is expired by keep"

umount_fs "$tmp/ma" "$pa"
umount_fs "$tmp/mb" "$pb"
pass "unmounted"
