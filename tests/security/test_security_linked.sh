#!/usr/bin/env bash
# test_security_linked.sh - a symlink owned by root in root's pipelines
# folder points at a user's spec (docs/security.md, "Trust model"): the
# spec is served, and its stage runs as the spec's real owner (the user),
# in the real spec's folder, on the inputs beside the real spec, never in
# or from the link's folder.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

# root's pipelines folder, with inputs of its own where the link lies
p=$tmp/p
install -d -m 0755 "$p" "$p/in"
echo root-input >"$p/in/a.txt"

# the user's project
u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/proj" "$u/proj/in"
as_user sh -c 'echo user-input >"$1/in/a.txt"' sh "$u/proj"
as_user tee "$u/proj/linked.yaml" >/dev/null <<'YAML'
name: linked
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo "uid=$(id -u)"; echo "pwd=$(pwd -P)"; cat']
YAML
ln -s "$u/proj/linked.yaml" "$p/linked.yaml"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 has_name "$mnt" linked || fail "the linked spec is not registered"
out=$(as_user cat "$mnt/linked/shard-00000") || fail "linked: read failed"
want=$(printf 'uid=%s\npwd=%s\nuser-input' "$uid" "$(realpath "$u/proj")")
[ "$out" = "$want" ] || fail "linked: got
$out
want
$want"
pass "a root-owned link to a user's spec runs as the user, in the spec's real folder"
umount_fs "$mnt" "$mpid"
