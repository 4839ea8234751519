#!/usr/bin/env bash
# test_mount_generation.sh - a reader never sees a size or cached pages of
# another computation of the same shard. The stage's output differs on
# every run (a counter per shard), has the same length every time and
# spans many chunks, so bytes of two computations can be told apart and
# neither the size nor the kernel's page cache gives the other away:
# (a) a fingerprint expired (rm -r, keep, matctl rm, matctl expire) that a
# spec yields again later; (b) matctl rm from another process between
# rounds of reads; (c) a descriptor held across a recompute of its shard
# keeps reading its own computation, and a new reader reads the new one,
# whole.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1; do printf 'input %d\n' $k >"$pipes/in/$k.txt"; done
lines=20000 # 13 bytes each: 260000 bytes, 16 chunks of 16 KiB
# spec NAME TAG [KEEP]: pipeline NAME; TAG changes its fingerprint only.
# Its shard K counts its computations in count.NAME.K.
spec() {
  cat >"$pipes/$1.tmp" <<YAML
name: $1
inputs: in/*.txt
chunk_size: 16KiB
${3:+keep: $3}
stages:
  - exec: [/bin/sh, -c, 'c=count.$1.\$MATFS_SHARD; n=\$(( \$(cat \$c 2>/dev/null || echo 0) + 1 )); echo \$n >\$c; cat >/dev/null; seq -f "\$(printf %04d \$n) %07g" 1 $lines', $2]
YAML
  mv "$pipes/$1.tmp" "$pipes/$1.yaml"
}
# want N: the output of a shard's Nth computation
want() { seq -f "$(printf %04d "$1") %07g" 1 $lines; }
# count K [NAME]: computations of shard K of NAME (gen) so far
count() { cat "$pipes/count.${2:-gen}.$1" 2>/dev/null || echo 0; }
# check FILE K WHAT [NAME]: FILE holds exactly shard K's latest computation
check() {
  local n
  n=$(count "$2" "${4:-gen}")
  [ -s "$1" ] || fail "$3: empty read (computation $n)"
  cmp -s "$1" <(want "$n") ||
    fail "$3: not computation $n of shard $2: $(head -c 12 "$1") ... $(tail -c 13 "$1")"
}
# read_check PATH K WHAT [NAME]: stat (the kernel may cache that size),
# then read
read_check() {
  stat -c %s "$1" >/dev/null
  cat "$1" >"$tmp/got" || fail "$3: cat failed"
  check "$tmp/got" "$2" "$3" "${4:-}"
}
# link_is FP [NAME]: NAME (gen) points at FP
link_is() { [ "$(readlink "$mnt/${2:-gen}")" = "$1" ]; }
gone() { local names; ! { names=$(ls "$mnt") && grep -qx "$1" <<<"$names"; }; }
# landed PATH: the shard read last is committed (a read may be served from
# the sealed file before its commit lands; matctl rm of a shard still being
# committed is EBUSY, as documented)
landed() { [ "$(xattr "$1" state)" = materialized ]; }

spec gen one
mount_fs "$mnt" "$store" "$pipes"
fp1=$(readlink "$mnt/gen") || fail "no gen link"
s0=$mnt/gen/shard-00000
read_check "$s0" 0 "first read"
pass "a shard reads as its computation"

# --- (a) rm -r through the mount, then a spec yields the fingerprint again
spec gen two
fp2=$("$matctl" fingerprint "$pipes/gen.yaml") || fail "matctl fingerprint"
wait_for 10 link_is "$fp2" || fail "edit did not move gen"
read_check "$s0" 0 "read after an edit"
rm -r "$mnt/$fp1" || fail "rm -r of the old fingerprint"
wait_for 10 gone "$fp1" || fail "rm -r left $fp1 listed"
spec gen one
wait_for 10 link_is "$fp1" || fail "revert did not move gen back"
for i in 1 2 3; do
  read_check "$mnt/$fp1/shard-00000" 0 "(a) rm -r, revert, read $i"
  rm -r "$mnt/$fp1" || fail "rm -r of the current fingerprint"
done
pass "(a) rm -r and a spec that yields the fingerprint again: every read is whole"

# --- (a) matctl rm and matctl expire of the registered fingerprint ---
for i in 1 2 3; do
  read_check "$s0" 0 "(a) before matctl rm $i"
  wait_for 10 landed "$s0" || fail "(a) shard 0 not committed: $(xattr "$s0" state)"
  "$matctl" --store "$store" rm "$fp1" >/dev/null || fail "matctl rm"
  read_check "$s0" 0 "(a) after matctl rm $i"
  "$matctl" --store "$store" expire --older-than 0s >/dev/null || fail "matctl expire"
done
read_check "$s0" 0 "(a) after matctl expire"
pass "(a) matctl rm and matctl expire: every read is whole"

# --- (a) keep: 1 expires the fingerprint; going back computes it again.
# Pipeline kp: each fingerprint is expired (its rows deleted) before the
# other is read again, so the more recently used one is always the current.
spec kp one 1
wait_for 10 test -L "$mnt/kp" || fail "no kp link"
k1=$(readlink "$mnt/kp")
spec kp two 1
k2=$("$matctl" fingerprint "$pipes/kp.yaml") || fail "matctl fingerprint"
wait_for 10 link_is "$k2" kp || fail "kp edit did not move kp"
wait_for 10 gone "$k1" || fail "keep: 1 kept $k1"
spec kp one 1
wait_for 10 link_is "$k1" kp || fail "kp revert did not move kp"
wait_for 10 gone "$k2" || fail "keep: 1 kept $k2"
for i in 1 2 3; do
  read_check "$mnt/kp/shard-00000" 0 "(a) keep: 1, $k1, round $i" kp
  spec kp two 1
  wait_for 10 link_is "$k2" kp || fail "kp edit did not move kp"
  wait_for 10 gone "$k1" || fail "keep: 1 kept $k1"
  read_check "$mnt/kp/shard-00000" 0 "(a) keep: 1, $k2, round $i" kp
  spec kp one 1
  wait_for 10 link_is "$k1" kp || fail "kp revert did not move kp"
  wait_for 10 gone "$k2" || fail "keep: 1 kept $k2"
done
read_check "$mnt/kp/shard-00000" 0 "(a) keep: 1, last" kp
pass "(a) keep: 1 and going back: every read is whole"

# --- (b) rounds of: read every shard, then matctl rm from another process
for round in $(seq 1 8); do
  for k in 0 1; do
    read_check "$mnt/gen/shard-0000$k" $k "(b) round $round"
    wait_for 10 landed "$mnt/gen/shard-0000$k" ||
      fail "(b) shard $k not committed: $(xattr "$mnt/gen/shard-0000$k" state)"
  done
  "$matctl" --store "$store" rm gen >/dev/null || fail "matctl rm gen"
done
pass "(b) matctl rm between rounds of reads: every read is whole"

# --- (c) a descriptor held across a recompute; a new reader meanwhile ---
"$py" - "$s0" "$store" "$matctl" "$pipes/count.gen.0" "$lines" <<'PY' || fail "(c)"
import os, subprocess, sys, time
path, store, matctl, count, lines = sys.argv[1:6]

def want(n):
    return b"".join(b"%04d %07d\n" % (n, i) for i in range(1, int(lines) + 1))

def latest():
    return int(open(count).read())

def landed():  # a read may be served before its commit lands; rm waits
    for _ in range(1000):
        if os.getxattr(path, "user.matfs.state") == b"materialized":
            return
        time.sleep(0.01)
    raise AssertionError("shard 0 not committed")

for rnd in range(4):
    f = open(path, "rb", buffering=0)
    half = f.read(len(want(0)) // 2)
    mine = int(half[:4])
    size = os.fstat(f.fileno()).st_size
    landed()
    subprocess.run([matctl, "--store", store, "rm", "gen"], check=True,
                   stdout=subprocess.DEVNULL)
    new = open(path, "rb").read()          # computes it again
    assert new == want(latest()), ("new reader", rnd, new[:12], new[-13:])
    assert latest() != mine
    rest = f.read()                         # the held one: its own bytes
    assert half + rest == want(mine), ("held", rnd, mine, rest[:12])
    assert os.fstat(f.fileno()).st_size == size
    f.seek(0)
    assert f.read() == want(mine), ("held, again", rnd)
    f.close()
    again = open(path, "rb").read()
    assert again == want(latest()), ("after close", rnd, again[:12])
PY
pass "(c) a held descriptor reads its own computation, a new reader the new one"

umount_fs "$mnt" "$mpid"
