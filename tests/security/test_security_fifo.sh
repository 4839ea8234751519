#!/usr/bin/env bash
# test_security_fifo.sh - a FIFO named *.yaml blocks nothing (docs/
# security.md, "Trust model"): with one in a user's pipelines folder the
# mount comes up and serves the user's other spec, a second FIFO added
# while mounted does not stop a later spec from registering, and
# `matctl fingerprint` on a FIFO fails at once, as the user and as root
# (the 10 s limit is a guard, not a timing assertion).
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c 'echo input >"$1/in/a.txt"' sh "$u/pipelines"
as_user mkfifo "$u/pipelines/x.yaml"
as_user tee "$u/pipelines/ok.yaml" >/dev/null <<'YAML'
name: ok
inputs: in/*.txt
stages:
  - exec: [cat]
YAML

# fingerprint FIFO: matctl refuses it at once
fingerprint() {
  local rc=0
  "$@" timeout 10 "$matctl" fingerprint "$u/pipelines/x.yaml" \
    >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -ne 124 ] || fail "matctl fingerprint x.yaml blocks"
  [ "$rc" -ne 0 ] || fail "matctl fingerprint x.yaml: $(cat "$tmp/out")"
  grep -q x.yaml "$tmp/err" || fail "the error names no file: $(cat "$tmp/err")"
}
fingerprint as_user
fingerprint env
pass "matctl fingerprint on a FIFO fails at once, as the user and as root"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/pipelines"
wait_for 20 has_name "$mnt" ok || fail "ok is not registered"
out=$(as_user cat "$mnt/ok/shard-00000") || fail "ok: read failed"
[ "$out" = input ] || fail "ok: got '$out'"
pass "the mount comes up beside a FIFO and serves the other spec"

as_user mkfifo "$u/pipelines/y.yaml"
as_user tee "$u/pipelines/later.yaml" >/dev/null <<'YAML'
name: later
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat; echo later']
YAML
wait_for 30 has_name "$mnt" later || fail "later did not register beside a new FIFO"
pass "a FIFO added while mounted does not stop a later spec"
umount_fs "$mnt" "$mpid"
