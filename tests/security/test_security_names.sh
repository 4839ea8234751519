#!/usr/bin/env bash
# test_security_names.sh - a pipeline name belongs to the spec file that
# holds it (docs/security.md, "Pipeline names"). Two users' specs are
# linked into root's pipelines folder, the attacker's sorting first. The
# attacker renames her pipeline to the victim's name: she is refused, with
# a log line naming both files, and the mount's name, a pinned read and
# matctl all still give the victim's bytes, also after a remount. A name
# of 64 hex digits (the victim's fingerprint) is refused as a spec error.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user
victim=$user
add_user
attacker=$user

p=$tmp/p
install -d -m 0755 "$p"
# make_project USER DIR NAME TEXT: a project whose stage prints TEXT
make_project() {
  install -d -o "$1" -g "$1" -m 0755 "$2" "$2/in"
  runuser -u "$1" -- sh -c 'echo x >"$1/in/a.txt"' sh "$2"
  write_spec "$1" "$2" "$3" "$4"
}
write_spec() { # USER DIR NAME TEXT
  runuser -u "$1" -- sh -c 'cat >"$1/spec.yaml.new" && mv "$1/spec.yaml.new" "$1/spec.yaml"' sh "$2" <<YAML
name: $3
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; echo $4']
YAML
}
make_project "$victim" "$tmp/v" tokens victim-bytes
make_project "$attacker" "$tmp/a" mine attacker-bytes
ln -s "$tmp/a/spec.yaml" "$p/aa-attacker.yaml"
ln -s "$tmp/v/spec.yaml" "$p/zz-victim.yaml"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 has_name "$mnt" tokens || fail "tokens is not registered"
wait_for 20 has_name "$mnt" mine || fail "mine is not registered"
fp=$(readlink "$mnt/tokens")
[ "$(cat "$mnt/tokens/shard-00000")" = victim-bytes ] || fail "tokens: wrong bytes"

# check_victim WHAT: every way to the victim's pipeline gives its bytes
check_victim() {
  [ "$(readlink "$mnt/tokens")" = "$fp" ] ||
    fail "$1: tokens points at $(readlink "$mnt/tokens"), not $fp"
  [ "$(cat "$mnt/tokens/shard-00000")" = victim-bytes ] ||
    fail "$1: tokens serves $(cat "$mnt/tokens/shard-00000")"
  [ "$(cat "$mnt/$fp/shard-00000")" = victim-bytes ] ||
    fail "$1: the pinned read serves $(cat "$mnt/$fp/shard-00000")"
  [ "$("$matctl" --store "$tmp/store" cat tokens 0)" = victim-bytes ] ||
    fail "$1: matctl cat tokens serves another pipeline"
  [ "$(ls "$mnt" | grep -cx "$fp")" = 1 ] ||
    fail "$1: the root lists $fp $(ls "$mnt" | grep -cx "$fp") times"
}

write_spec "$attacker" "$tmp/a" tokens attacker-bytes
wait_for 20 grep -q "name 'tokens' belongs to spec '$p/zz-victim.yaml' of another owner" "$log" ||
  fail "the clash is not logged naming the holder"
grep "name 'tokens' belongs to" "$log" | grep -q "spec '$p/aa-attacker.yaml'" ||
  fail "the clash's log line does not name the refused file"
check_victim "an attacker taking the name"
pass "a second spec taking a name is refused; the name stays its holder's"

umount_fs "$mnt" "$mpid"
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 has_name "$mnt" tokens || fail "tokens is not registered again"
check_victim "after a remount"
pass "the name stays its holder's after a remount"

write_spec "$attacker" "$tmp/a" "$fp" attacker-bytes
wait_for 20 grep -q "64 hex digits read as a fingerprint" "$log" ||
  fail "a fingerprint-like name is not refused"
check_victim "an attacker naming her pipeline after the fingerprint"
pass "a name of 64 hex digits is refused"

# the holder's file is gone for a moment (an editor, git checkout, ln -sf
# remove and make it again) while the attacker's changes: still refused
write_spec "$attacker" "$tmp/a" mine attacker-bytes
wait_for 20 has_name "$mnt" mine || fail "mine is not registered again"
runuser -u "$victim" -- mv "$tmp/v/spec.yaml" "$tmp/v/spec.yaml.away"
n=$(grep -c "name 'tokens' belongs to" "$log")
write_spec "$attacker" "$tmp/a" tokens attacker-bytes
wait_for 20 sh -c "[ \$(grep -c \"name 'tokens' belongs to\" '$log') -gt $n ]" ||
  fail "the attacker's spec was not refused while the holder's file was away"
runuser -u "$victim" -- mv "$tmp/v/spec.yaml.away" "$tmp/v/spec.yaml"
runuser -u "$victim" -- touch "$tmp/v/spec.yaml"
# its registration again is the watcher's, a moment later (seconds when
# the machine is loaded): wait for it, then check everything
wait_for 20 sh -c "[ \"\$(readlink '$mnt/tokens')\" = '$fp' ]" ||
  fail "tokens is not the holder's again: $(readlink "$mnt/tokens")"
check_victim "the holder's file away for a moment"
pass "a holder's file gone for a moment keeps its name"

# the holder renames its pipeline: the name is free for another file
write_spec "$victim" "$tmp/v" tokens2 victim-bytes
wait_for 20 has_name "$mnt" tokens2 || fail "tokens2 is not registered"
write_spec "$attacker" "$tmp/a" tokens attacker-bytes
wait_for 20 sh -c "[ \"\$(cat '$mnt/tokens/shard-00000')\" = attacker-bytes ]" ||
  fail "a name its holder gave up is not free for another spec"
pass "a name its holder gave up is free"
umount_fs "$mnt" "$mpid"

# another host's holder: a second daemon on the same store whose
# pipelines folder only it can see (its own mount namespace, as a
# cluster's host with a folder of its own) holds 'hosted'; here the
# holder's file is not found, yet the attacker's spec is refused, as the
# holder is alive and serves it
make_project "$victim" "$tmp/vh" hosted victim-bytes
hA=$tmp/hostA
install -d -m 0755 "$hA" "$tmp/mntA"
# (the namespace's copies of the FUSE mounts of tests running beside this
# one are detached first: a copy would keep such a mount alive)
unshare -m --propagation private sh -c "awk '\$3 ~ /^fuse/ { print \$2 }' /proc/self/mounts |
  while read -r m; do umount -l \"\$(printf '%b' \"\$m\")\" 2>/dev/null; done
  mount -t tmpfs -o mode=0755 none '$hA' &&
  mkdir -m 0755 '$hA/p' && ln -s '$tmp/vh/spec.yaml' '$hA/p/victim.yaml' &&
  exec '$matfs' --store '$tmp/store' --pipelines '$hA/p' -f '$tmp/mntA'" >>"$log" 2>&1 &
apid=$!
daemons+=("$apid")
wait_for 20 grep -q "$hA/p/victim.yaml': fingerprint" "$log" || fail "host A did not register"
[ ! -e "$hA/p/victim.yaml" ] || fail "host A's folder is visible here: the test proves nothing"
mount_fs "$mnt" "$tmp/store" "$p"
write_spec "$attacker" "$tmp/a" hosted attacker-bytes
wait_for 20 grep -q "name 'hosted' belongs to spec '$hA/p/victim.yaml' of another owner" "$log" ||
  fail "another host's holder does not keep its name"
! has_name "$mnt" hosted || fail "the attacker took another host's name"
[ "$("$matctl" --store "$tmp/store" ls | awk '$1 == "hosted"' | wc -l)" = 1 ] ||
  fail "the catalog lists another 'hosted': $("$matctl" --store "$tmp/store" ls)"
pass "a name held by a live process elsewhere stays its holder's"
