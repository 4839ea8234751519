#!/usr/bin/env bash
# test_security_glob.sh - a user's spec globs into root's 0700 folder
# (attack "disclosure" of docs/security.md's trust model). Inputs are
# examined with the spec owner's rights, so the daemon sees what the owner
# would see with `matctl fingerprint`: nothing of that folder. No file
# name, count or size from it shows in the mount's listing, xattrs or
# shards as the user reads them, in the store or in the daemon's log, and
# the fingerprint is the one the owner computes (or the spec is refused,
# as the owner's own matctl refuses it).
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

# root's folder: three files with a telling name and size
secret=$tmp/secret
install -d -m 0700 "$secret"
for i in 1 2 3; do head -c 31337 /dev/zero >"$secret/hidden-Qz7-$i.dat"; done

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c 'echo input >"$1/in/a.txt"' sh "$u/pipelines"
as_user tee "$u/pipelines/peek.yaml" >/dev/null <<'YAML'
name: peek
inputs: [in/*.txt, ../../secret/*.dat]
stages:
  - exec: [/bin/sh, -c, 'printf "%s\n" "$MATFS_INPUTS"; wc -c']
YAML
as_user tee "$u/pipelines/ctl.yaml" >/dev/null <<'YAML'
name: ctl
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'printf "%s\n" "$MATFS_INPUTS"; wc -c']
YAML

mnt=$tmp/mnt store=$tmp/store
mount_fs "$mnt" "$store" "$u/pipelines"
wait_for 20 has_name "$mnt" ctl || fail "ctl is not registered"
# the daemon has made up its mind about peek (registered or refused)
wait_for 20 grep -q "peek.yaml" "$log" || fail "peek.yaml: no outcome logged"

# what the user sees through the mount
if has_name "$mnt" peek; then
  shards=$(as_user ls "$mnt/peek/")
  [ "$shards" = shard-00000 ] || fail "peek lists $(echo "$shards" | wc -l) shards: the files of root's folder count"
  as_user cat "$mnt/peek/shard-00000" >"$tmp/out" 2>/dev/null || true
  ! grep -aq hidden- "$tmp/out" || fail "peek's shard names root's files: $(cat "$tmp/out")"
fi
as_user getfattr --absolute-names -R -d -m '^user\.matfs\.' "$mnt" >"$tmp/xattrs" 2>/dev/null || true
grep -q 'user.matfs.state' "$tmp/xattrs" || fail "the user sees no xattrs at all"
! grep -Eq 'hidden-|31337' "$tmp/xattrs" || fail "xattrs show root's files: $(grep -E 'hidden-|31337' "$tmp/xattrs")"
pass "the listing, shards and xattrs show nothing of root's folder"

! grep -q hidden- "$log" || fail "the log names root's files: $(grep hidden- "$log")"
! grep -rqa hidden- "$store" || fail "the store names root's files: $(grep -rla hidden- "$store")"
pass "the log and the store name nothing of root's folder"

# the daemon computed what the owner computes with their own rights
if want=$(as_user "$matctl" fingerprint "$u/pipelines/peek.yaml" 2>"$tmp/err"); then
  has_name "$mnt" peek || fail "peek is refused, but its owner computes $want"
  got=$(readlink "$mnt/peek")
  [ "$got" = "$want" ] || fail "peek is $got, its owner computes $want: root's files entered it"
  pass "peek's fingerprint is the one its owner computes"
else
  ! has_name "$mnt" peek || fail "peek is registered as $(readlink "$mnt/peek"), its owner's matctl refuses it: $(cat "$tmp/err")"
  pass "peek is refused, as its owner's matctl refuses it"
fi
umount_fs "$mnt" "$mpid"
