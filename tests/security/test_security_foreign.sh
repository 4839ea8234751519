#!/usr/bin/env bash
# test_security_foreign.sh - attack (b) of docs/security.md's trust model:
# a root-owned spec placed in a folder a user owns, whose stage runs
# ./tool.sh, a program that user wrote. Its stages would run as root
# (the spec's owner) with the user's program: it is never run as root
# (the spec is refused, or its shard fails, or it runs as the user).
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c 'echo input >"$1/in/a.txt"' sh "$u/pipelines"
as_user tee "$u/pipelines/tool.sh" >/dev/null <<'SH'
#!/bin/sh
cat >/dev/null
echo "uid=$(id -u)"
SH
as_user chmod 0755 "$u/pipelines/tool.sh"
as_user tee "$u/pipelines/ctl.yaml" >/dev/null <<'YAML'
name: ctl
inputs: in/*.txt
stages:
  - exec: [./tool.sh]
YAML
# root's spec, in the user's folder (root may write anywhere)
cat >"$u/pipelines/rootspec.yaml" <<'YAML'
name: rootspec
inputs: in/*.txt
stages:
  - exec: [./tool.sh]
    deps: [tool.sh]
YAML
chown root:root "$u/pipelines/rootspec.yaml"
chmod 0644 "$u/pipelines/rootspec.yaml"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/pipelines"

# the user's own spec with the same program runs as the user
wait_for 20 has_name "$mnt" ctl || fail "ctl is not registered"
out=$(as_user cat "$mnt/ctl/shard-00000") || fail "ctl: read failed"
[ "$out" = "uid=$uid" ] || fail "ctl ran as '$out', want uid=$uid"
pass "the user's own spec runs the user's program as the user"

# root's spec in the user's folder never runs it as root
if has_name "$mnt" rootspec; then
  f=$mnt/rootspec/shard-00000
  if as_user cat "$f" >"$tmp/out" 2>/dev/null; then
    ! grep -aq 'uid=0' "$tmp/out" || fail "$f: the user's program ran as root"
  fi
  pass "root's spec in the user's folder never runs the user's program as root"
else
  pass "root's spec in a folder the user owns is refused"
fi
umount_fs "$mnt" "$mpid"
