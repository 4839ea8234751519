#!/usr/bin/env bash
# test_security_group.sh - a group's write bit counts as the owner's own
# only when nobody else is in the group (docs/security.md, "Loading a
# spec"): a second user whose primary group is the first user's private
# group (not listed in the group's members) can write the first user's
# umask 002 folder and program. The spec is refused, naming the group,
# and the second user's code never runs as the first user.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user
gid=$(id -g "$user")
other=mfsecg$$
useradd -M -N -g "$gid" -s /bin/sh "$other" 2>"$tmp/useradd.err" ||
  fail "useradd $other: $(cat "$tmp/useradd.err")"
users+=("$other")

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
install -d -o "$user" -g "$user" -m 0775 "$u/p"
as_user sh -c 'cd "$1" && umask 002 && mkdir in && echo x >in/a.txt &&
  printf "#!/bin/sh\necho own-tool\n" >tool.sh && chmod +x tool.sh' sh "$u/p"
as_user tee "$u/p/s.yaml" >/dev/null <<'YAML'
name: s
inputs: in/*.txt
stages:
  - exec: [./tool.sh]
YAML
# the other user rewrites the user's program: its group lets it
runuser -u "$other" -- sh -c 'printf "#!/bin/sh\necho planted; id -un\n" >"$1"' \
  sh "$u/p/tool.sh" || fail "$other cannot write $u/p/tool.sh"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/p"
wait_for 20 grep -q "s.yaml: .*not its owner's own group: refused" "$log" ||
  fail "the spec in a folder $other can write was not refused"
! has_name "$mnt" s || fail "s is registered: $(cat "$mnt/s/shard-00000" 2>&1)"
pass "a folder writable by a user whose primary group it is: refused"
umount_fs "$mnt" "$mpid"

# The same two users, made by a shell of their own that then exits: its
# cleanup leaves neither user nor group behind. A group left behind made
# a later useradd -U of the same name (a reused pid) fail.
names=$(bash -c '. "$MF_SOURCE_ROOT/tests/security/lib.sh"
  add_user
  useradd -M -N -g "$(id -g "$user")" -s /bin/sh "${user}g" || exit 1
  users+=("${user}g")
  echo "$user ${user}g"') || fail "a shell of its own could not add the two users"
for n in $names; do
  ! getent passwd "$n" >/dev/null || fail "user $n left behind"
  ! getent group "$n" >/dev/null || fail "group $n left behind"
done
pass "the users and their group are removed on exit"
