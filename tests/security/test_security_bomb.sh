#!/usr/bin/env bash
# test_security_bomb.sh - bounded parsing (docs/security.md, "Trust
# model"): a user's YAML alias bomb (9 levels of 10 aliases, 10^9 nodes
# once expanded), a list of 20,000 aliases of one glob and 3,000 stages
# are each refused by `matctl fingerprint` with an error naming the cap,
# under a 512 MiB address-space limit; the mount comes up with them in
# its pipelines folder and serves the user's other spec.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c 'echo input >"$1/in/a.txt"' sh "$u/pipelines"
as_user tee "$u/pipelines/ok.yaml" >/dev/null <<'YAML'
name: ok
inputs: in/*.txt
stages:
  - exec: [cat]
YAML
{
  printf 'name: bomb\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n'
  bomb_yaml
} | as_user tee "$u/pipelines/bomb.yaml" >/dev/null
as_user python3 -c 'import sys
open(sys.argv[1] + "/globs.yaml", "w").write(
    "name: globs\ninputs: [&g \"in/*.txt\"" + ", *g" * 20000 +
    "]\nstages:\n  - exec: [cat]\n")
open(sys.argv[1] + "/stages.yaml", "w").write(
    "name: stages\ninputs: in/*.txt\nstages:\n" + "  - exec: [cat]\n" * 3000)
' "$u/pipelines"

# A sanitizer's runtime reserves terabytes of address space, so the
# 512 MiB limit applies only to a build without one.
# (ldd's output is read whole: grep -q in a pipe could leave ldd to die of
# SIGPIPE, which pipefail turns into "no sanitizer")
limit="ulimit -v 524288;"
libs=$(ldd "$matctl")
grep -Eq 'lib(a|ub|t)san' <<<"$libs" && limit=""
# cap SPEC PATTERN: matctl refuses SPEC, naming the cap (PATTERN).
cap() {
  local rc=0
  as_user timeout 60 sh -c "$limit exec \"\$0\" fingerprint \"\$1\"" \
    "$matctl" "$u/pipelines/$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -ne 124 ] || fail "$1: matctl still runs after 60 s"
  [ "$rc" -ne 0 ] || fail "$1: accepted as $(cat "$tmp/out")"
  { grep -Eiq "$2" "$tmp/err" && grep -q "[0-9]" "$tmp/err"; } ||
    fail "$1: the error names no cap: $(cat "$tmp/err")"
  grep -q "$1" "$tmp/err" || fail "$1: the error names no file: $(cat "$tmp/err")"
}
cap bomb.yaml 'alias|node'
cap globs.yaml 'alias|glob'
cap stages.yaml 'stage'
pass "an alias bomb, 20,000 globs and 3,000 stages are refused, naming the cap"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/pipelines"
wait_for 20 has_name "$mnt" ok || fail "ok is not registered"
out=$(as_user cat "$mnt/ok/shard-00000") || fail "ok: read failed"
[ "$out" = input ] || fail "ok: got '$out'"
for n in bomb globs stages; do
  ! has_name "$mnt" $n || fail "$n is registered"
  grep -q "$n.yaml" "$log" || fail "$n.yaml: no error logged"
done
pass "the mount serves the other spec and logs each refusal"
umount_fs "$mnt" "$mpid"
