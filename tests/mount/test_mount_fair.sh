#!/usr/bin/env bash
# test_mount_fair.sh - one user's slow specs delay no other user's: specs
# of one owner whose deps take minutes to hash (sparse 1 TiB files) use
# no more than that owner's share of the registration threads, so a spec
# of another owner registers at once; and a registration past
# -o spec_timeout stops hashing (its thread ends) and is not started
# again until something changes.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ "$(id -u)" = 0 ] || { echo "skip: needs root (a spec of another owner)"; exit 77; }
other=65534 # nobody: the owner of the second user's spec
n=8 limit=8

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
chmod 755 "$tmp" "$pipes" "$pipes/in"
echo payload >"$pipes/in/a.txt"
chmod 644 "$pipes/in/a.txt"
spec() { # spec NAME [DEP]
  printf 'name: %s\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' "$1"
  [ -z "${2:-}" ] || printf '    deps: [%s]\n' "$2"
}
for i in $(seq 1 $n); do
  truncate -s 1T "$pipes/big$i.bin"
  spec slow$i big$i.bin >"$pipes/slow$i.yaml"
done
mount_fs "$mnt" "$store" "$pipes" -o spec_timeout=$limit

has_link() { [ -L "$mnt/$1" ]; }
# timeouts: how many slow registrations passed their limit so far
timeouts() { grep -Ec "slow[0-9]+\.yaml: reading its deps and inputs took longer" "$log"; }
all_timed_out() { [ "$(timeouts)" -ge $n ]; }
# hashers: the daemon's registration threads that are still running
hashers() { grep -lx matfs-register /proc/"$mpid"/task/*/comm 2>/dev/null | wc -l; }
no_hashers() { [ "$(hashers)" -eq 0 ]; }

# another owner's spec, written while the slow ones hash
before=$(timeouts)
[ "$before" -lt $n ] || fail "every slow spec timed out before the test began"
spec other >"$tmp/other.yaml"
chown "$other" "$tmp/other.yaml"
mv "$tmp/other.yaml" "$pipes/other.yaml"
wait_for 20 has_link other || fail "another owner's spec waited for the slow ones"
[ "$(timeouts)" -eq "$before" ] ||
  fail "another owner's spec registered only after slow ones passed their limit"
h=$(hashers)
[ "$h" -le 3 ] || fail "$h registration threads at once: one owner took more than its share"
cmp -s "$mnt/other/shard-00000" "$pipes/in/a.txt" || fail "read of the other spec"
pass "a spec of another owner registers while one owner's specs hash for minutes"

# past the limit: every slow registration stops, and none starts again
wait_for 120 all_timed_out || fail "only $(timeouts) of $n slow specs reached their limit"
wait_for 30 no_hashers || fail "$(hashers) registration threads still hash past their limit"
sleep $((limit + 4)) # longer than the limit: a registration started again would show
no_hashers || fail "a spec stopped at its limit is hashed again, unchanged"
[ "$(timeouts)" -eq $n ] || fail "a slow spec was registered again: $(timeouts) timeouts"
has_link other || fail "the other spec lost its name"
pass "registrations past their limit stop hashing and are not retried unchanged"
