#!/usr/bin/env bash
# test_mount_listing.sh - a listing read in several READDIRPLUS replies
# while a shard changes: a shard opened (so materialized) after opendir
# keeps its exact size for fstat, read and mmap through the rest of the
# listing, whose entries were taken before the open; ls -l still shows
# every size.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
# 3000 empty inputs, one per shard: far more entries than one reply holds
(cd "$pipes/in" && seq -f 'f%04g.txt' 0 2999 | xargs touch)
cat >"$pipes/many.yaml" <<'YAML'
name: many
inputs: in/*.txt
chunk_size: 64KiB
stages:
  - exec: [/bin/sh, -c, 'echo "$MATFS_SHARD" >> calls; cat; seq 1 30000']
YAML
seq 1 30000 >"$tmp/want"
mount_fs "$mnt" "$store" "$pipes"
d=$mnt/many

# --- opened after opendir, before the listing reaches it ---
"$py" - "$d" "$tmp/want" <<'PY' || fail "size after an open during a listing"
import mmap, os, sys
d, want = sys.argv[1], open(sys.argv[2], "rb").read()
last = os.path.join(d, "shard-02999")
it = os.scandir(d)       # opendir: every shard absent, size 0
first = next(it)         # the first reply; shard-02999 comes much later
fd = os.open(last, os.O_RDONLY)  # computes it
names = [first.name] + [e.name for e in it]  # the rest, taken at opendir
it.close()
assert len(names) == 3000 and names[-1] == "shard-02999", (len(names), names[-1])
assert os.fstat(fd).st_size == len(want), ("fstat", os.fstat(fd).st_size)
assert os.stat(last).st_size == len(want), ("stat", os.stat(last).st_size)
# entries served without attributes still stat right
assert os.stat(os.path.join(d, names[-2])).st_size == 0
got = b""
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    got += b
assert got == want, ("read", len(got), len(want))
with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
    assert mm[:] == want, "mmap bytes differ"
os.close(fd)
PY
[ "$(calls "$pipes/calls")" -eq 1 ] || fail "$(calls "$pipes/calls") stage calls, want 1"
pass "a shard opened during a listing keeps its size; fstat, read and mmap exact"

# --- ls -l: every size, the materialized one exact ---
sizes=$(ls -l "$d/" | awk 'NR > 1 { n++; s[$5]++ } END { print n, s[0], s['"$(stat -c %s "$tmp/want")"'] }')
[ "$sizes" = "3000 2999 1" ] || fail "ls -l sizes (entries, zero, exact): $sizes"
sleep 1.1 # past every attribute timeout: the same again, from scratch
sizes=$(ls -l "$d/" | awk 'NR > 1 { n++; s[$5]++ } END { print n, s[0], s['"$(stat -c %s "$tmp/want")"'] }')
[ "$sizes" = "3000 2999 1" ] || fail "ls -l sizes after the timeouts: $sizes"
[ "$(calls "$pipes/calls")" -eq 1 ] || fail "ls -l ran a stage"
pass "ls -l shows 3000 shards, one materialized with its exact size"
umount_fs "$mnt" "$mpid"
