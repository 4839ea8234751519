#!/usr/bin/env bash
# test_expiry.sh - the daemon's expiry policy: a snapshot not read for its
# expire_after is expired (state absent, store file removed, size 0 in the
# mount) while a descriptor opened before reads the exact bytes to its end;
# one no spec registers leaves the mount and the store; with keep: 1 the
# older fingerprint of a name is expired and the current one kept; past
# -o max_size the least recently read snapshot is evicted first, and one
# with a shard open never.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'input\n' >"$pipes/in/0.txt"
cat >"$pipes/ea.yaml" <<'YAML'
name: ea
inputs: in/*.txt
chunk_size: 16KiB
expire_after: 2s
stages:
  - exec: [/bin/sh, -c, 'cat; seq 1 300000']
YAML
( cd "$pipes" && sh -c 'cat; seq 1 300000' <in/0.txt ) >"$tmp/want"
# keep: 1, never expired by age; its argv is edited while mounted
spec_kp() {
  cat >"$pipes/kp.tmp" <<YAML
name: kp
inputs: in/*.txt
keep: 1
stages:
  - exec: [/bin/sh, -c, 'cat; echo $1']
YAML
  mv "$pipes/kp.tmp" "$pipes/kp.yaml"
}
spec_kp one
mount_fs "$mnt" "$store" "$pipes"

store_files() { ls "$store/snapshots/$1"/*/*.mfs 2>/dev/null | wc -l; }
state_is() { [ "$(xattr "$1" state)" = "$2" ]; }
no_files() { [ "$(store_files "$1")" -eq 0 ]; }
gone() { [ ! -e "$mnt/$1" ] && [ ! -e "$store/snapshots/$1" ]; }
unlisted() { local names; ! { names=$(ls "$mnt") && grep -qx "$1" <<<"$names"; }; }

# --- expire_after: the data goes; an open descriptor keeps reading ---
fp=$(readlink "$mnt/ea") || fail "no ea link"
f=$mnt/ea/$(ls "$mnt/ea" | head -n 1)
"$py" - "$f" "$tmp/want" "$store/snapshots/$fp" <<'PY' || fail "descriptor across expiry"
import glob, os, sys, time
want = open(sys.argv[2], "rb").read()
f = open(sys.argv[1], "rb", buffering=0)
head = f.read(100000)
end = time.monotonic() + 10  # the commit follows the read
while not glob.glob(sys.argv[3] + "/*/*.mfs"):
    assert time.monotonic() < end, "no store file 10 s after a read"
    time.sleep(0.05)
end = time.monotonic() + 10
while glob.glob(sys.argv[3] + "/*/*.mfs"):
    assert time.monotonic() < end, "not expired within 10 s"
    time.sleep(0.1)
rest = b""
while True:
    b = f.read(65536)
    if not b:
        break
    rest += b
assert head + rest == want, (len(head), len(rest), len(want))
assert os.fstat(f.fileno()).st_size == len(want)
f.close()
PY
wait_for 5 state_is "$f" absent || fail "state after expiry: $(xattr "$f" state)"
[ "$(stat -c %s "$f")" -eq 0 ] || fail "size after expiry: $(stat -c %s "$f")"
[ "$(xattr "$mnt/$fp" materialized)" = 0 ] || fail "materialized after expiry"
listing=$(ls "$mnt/$fp") || fail "a registered snapshot left the listing"
grep -q . <<<"$listing" || fail "a registered snapshot left the listing"
pass "expire_after expires a snapshot; a descriptor opened before reads to its end"

# read again: computed again (and expired again 2 s later)
cmp "$f" "$tmp/want" || fail "read after expiry"
# the read can end before the commit of what it read (served sealed)
wait_for 10 state_is "$f" materialized || fail "state after the re-read: $(xattr "$f" state)"
pass "a read after expiry computes the shard again"

# a snapshot no spec registers leaves the catalog, the mount and the store
rm "$pipes/ea.yaml"
wait_for 10 test ! -e "$mnt/ea" || fail "ea link kept after its spec left"
wait_for 10 gone "$fp" || fail "unregistered snapshot kept: $(ls "$mnt")"
unlisted "$fp" || fail "expired snapshot still listed"
"$matctl" --store "$store" stat "$fp" >/dev/null 2>&1 &&
  fail "matctl stat still finds the expired snapshot"
pass "an expired snapshot no spec registers leaves the mount and the store"

# --- keep: 1: the older fingerprint of a name goes, the current stays ---
fp1=$(readlink "$mnt/kp") || fail "no kp link"
k1=$mnt/$fp1/$(ls "$mnt/kp" | head -n 1)
[ "$(cat "$k1")" = "$(printf 'input\none')" ] || fail "kp first read: $(cat "$k1")"
spec_kp two
moved() { [ "$(readlink "$mnt/kp")" != "$fp1" ]; }
wait_for 10 moved || fail "kp fingerprint did not change"
fp2=$(readlink "$mnt/kp")
k2=$mnt/$fp2/$(ls "$mnt/kp" | head -n 1)
[ "$(cat "$k2")" = "$(printf 'input\ntwo')" ] || fail "kp second read: $(cat "$k2")"
# committed after the read (served sealed): then it must stay so
wait_for 10 state_is "$k2" materialized || fail "kp second read: $(xattr "$k2" state)"
wait_for 10 gone "$fp1" || fail "older fingerprint kept with keep: 1"
unlisted "$fp1" || fail "older fingerprint still listed"
sleep 1.5 # a few more passes: the current one stays
state_is "$k2" materialized || fail "current fingerprint expired"
[ "$(store_files "$fp2")" -eq 1 ] || fail "current fingerprint's file removed"
pass "keep: 1 expires the older fingerprint and keeps the current one"

umount_fs "$mnt" "$mpid"

# --- max_size: least recently read evicted first, an open one never ---
store2=$tmp/store2 pipes2=$tmp/p2 mnt2=$tmp/mnt2
mkdir -p "$pipes2"
for n in a b c; do
  head -c 300000 /dev/urandom >"$pipes2/$n.bin" # incompressible
  printf 'name: %s\ninputs: %s.bin\nstages:\n  - exec: [cat]\n' \
    "$n" "$n" >"$pipes2/$n.yaml"
done
mount_fs "$mnt2" "$store2" "$pipes2" -o max_size=700KiB
shard() { echo "$mnt2/$1/$(ls "$mnt2/$1" | head -n 1)"; }
for n in a b c; do eval "s_$n=\$(shard $n)"; done
# s_a, s_b, s_c: one shard each, about 300 KB stored
cmp "$s_a" "$pipes2/a.bin" || fail "read a"
sleep 1.1 # last-read times are whole seconds
cmp "$s_b" "$pipes2/b.bin" || fail "read b"
sleep 1.1
cmp "$s_c" "$pipes2/c.bin" || fail "read c"
wait_for 10 state_is "$s_a" absent || fail "a not evicted past max_size"
sleep 1.5 # more passes: under the limit now
state_is "$s_b" materialized || fail "b evicted though under the limit"
state_is "$s_c" materialized || fail "c evicted"
[ "$(ls "$store2"/snapshots/*/*/*.mfs | wc -l)" -eq 2 ] || fail "store files after eviction"
pass "max_size evicts the least recently read snapshot first"

# b is now the least recently read, but open: a's re-read evicts c instead
"$py" - "$s_b" "$pipes2/b.bin" "$s_a" "$pipes2/a.bin" "$s_c" <<'PY' || fail "open snapshot evicted"
import os, time
import sys
want = open(sys.argv[2], "rb").read()
f = open(sys.argv[1], "rb", buffering=0)
head = f.read(1000)
time.sleep(1.1)
assert open(sys.argv[3], "rb").read() == open(sys.argv[4], "rb").read()
def state(p):
    try:
        return os.getxattr(p, "user.matfs.state").decode()
    except OSError:
        return ""
end = time.monotonic() + 10
while state(sys.argv[5]) != "absent":
    assert time.monotonic() < end, "c not evicted while b is open"
    time.sleep(0.1)
assert state(sys.argv[1]) == "materialized", state(sys.argv[1])
rest = f.read()
assert head + rest == want
f.close()
PY
pass "a snapshot with a shard open is never evicted"
umount_fs "$mnt2" "$mpid"
