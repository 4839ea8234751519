#!/usr/bin/env bash
# test_security_hang.sh - one spec never delays another's registration
# (docs/security.md, "Trust model"): a user's spec whose dep is a file
# whose read hangs (a shard of a second matfs mount, whose stage waits for
# a file the test creates) is being fingerprinted, and while it still
# hangs the user adds another spec: its name appears. Once the dep's read
# returns, the first spec registers too. The bound on the wait is a guard,
# not a timing assertion.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

# the second mount: its one shard is computed only once $release exists
p2=$tmp/p2 m2=$tmp/m2 release=$tmp/p2/release
releases+=("$release")
install -d -m 0755 "$p2" "$p2/in"
echo slow-input >"$p2/in/a.txt"
cat >"$p2/slow.yaml" <<'YAML'
name: slow
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat; while [ ! -e release ]; do sleep 0.1; done']
    timeout: 10m
YAML
mount_fs "$m2" "$tmp/store2" "$p2"
m2pid=$mpid
wait_for 20 has_name "$m2" slow || fail "slow is not registered"

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c 'echo input >"$1/in/a.txt"' sh "$u/pipelines"
as_user tee "$u/pipelines/first.yaml" >/dev/null <<'YAML'
name: first
inputs: in/*.txt
stages:
  - exec: [cat]
YAML
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/pipelines"
m1pid=$mpid
wait_for 20 has_name "$mnt" first || fail "first is not registered"

# the hanging spec: reading its dep starts slow's stage, which waits
slow_state() {
  getfattr --absolute-names --only-values -n user.matfs.state "$m2/slow/shard-00000"
}
is_running() { [ "$(slow_state)" = running ]; }
as_user tee "$u/pipelines/hang.yaml" >/dev/null <<'YAML'
name: hang
inputs: in/*.txt
stages:
  - exec: [cat]
    deps: [../../m2/slow/shard-00000]
YAML
wait_for 30 is_running || fail "nothing reads hang's dep (slow is $(slow_state))"
pass "registering hang reads its dep, which hangs"

# another spec registers while hang's dep still hangs
as_user tee "$u/pipelines/other.yaml" >/dev/null <<'YAML'
name: other
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat; echo other']
YAML
wait_for 30 has_name "$mnt" other ||
  fail "other did not register while hang's dep hangs"
is_running || fail "slow is $(slow_state): hang's dep no longer hangs"
[ ! -e "$release" ] || fail "released too early"
! has_name "$mnt" hang || fail "hang registered while its dep hangs"
out=$(as_user cat "$mnt/other/shard-00000") || fail "other: read failed"
[ "$out" = "input
other" ] || fail "other: got '$out'"
pass "another spec registers and serves while hang's dep hangs"

# once the read returns, hang registers too (within the time bound)
touch "$release"
wait_for 60 has_name "$mnt" hang || fail "hang did not register once its dep was readable"
pass "hang registers once its dep can be read"
umount_fs "$mnt" "$m1pid"
umount_fs "$m2" "$m2pid"
