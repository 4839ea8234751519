#!/usr/bin/env bash
# test_mount_push.sh - a shard the daemon computes for a waiting open has
# its pages put in the kernel's cache as the stages write them: its first
# reader gets exact bytes with (nearly) no read reaching the daemon (the
# root's .bytes_pushed counts every byte, .bytes_served what the machine
# paged out meanwhile), with every codec, through read and through mmap;
# stat, ls -l and listings while it computes see the bytes pushed so far;
# a failed attempt's pages, longer than the output that follows, are
# never read, with or without a stat first, and the next attempt's are
# kept; after rm, a nondeterministic stage's new bytes are read, never
# the old pages; with a descriptor open on the old computation its
# bytes stay its own; -o nopush leaves the pages to reads (the chunk
# cache's tap, test_mount_tap.sh); and a push stopped by -o push_max in
# the middle of a chunk leaves whole pages only.
. "${MF_SOURCE_ROOT:?}/tests/mount/lib.sh" || exit 1

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1; do echo $k >"$pipes/in/$k.txt"; done
# det_C: 2 shards (one per input), 64 KiB chunks, codec C, about 700 KB each
# (the same bytes, a fingerprint each: \$0 names the spec);
# rnd: random bytes each time (a copy in last.K), 300000 bytes and then a
# failure while the file `fail` exists, 100000 bytes otherwise.
for c in none snappy zstd:3; do
  n=det_${c%%:*}
  cat >"$pipes/$n.yaml" <<YAML
name: $n
inputs: in/*.txt
chunk_size: 64KiB
compression: $c
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; seq \$((MATFS_SHARD * 7)) 120000', $n]
YAML
done
cat >"$pipes/rnd.yaml" <<'YAML'
name: rnd
inputs: in/0.txt
chunk_size: 64KiB
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; if [ -e fail ]; then head -c 300000 /dev/urandom; exit 1; fi; head -c 100000 /dev/urandom | tee last.$MATFS_SHARD']
YAML
# endless: output that never ends, for a daemon stopped while it pushes
cat >"$pipes/endless.yaml" <<'YAML'
name: endless
inputs: in/0.txt
chunk_size: 1MiB
compression: none
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; while :; do seq 1 100000; sleep 0.01; done']
YAML
# cut: chunks of 100000 bytes (not whole pages) in a shard larger than
# the push_max of the third mount below
cat >"$pipes/cut.yaml" <<'YAML'
name: cut
inputs: in/0.txt
chunk_size: 100000
compression: none
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; seq 1 300000']
YAML
seq 1 300000 >"$tmp/want_cut"
# wide: chunks of 3000000 bytes, larger than the push thread's buffers
# (2 MiB) and not whole pages, so that a buffer fills in the middle of a
# chunk and a partial page goes on into the next buffer
cat >"$pipes/wide.yaml" <<'YAML'
name: wide
inputs: in/0.txt
chunk_size: 3000000
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; seq 1 1500000']
YAML
seq 1 1500000 >"$tmp/want_wide"
# slow: two bursts a second apart, so that a stat lands in between
cat >"$pipes/slow.yaml" <<'YAML'
name: slow
inputs: in/0.txt
chunk_size: 64KiB
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; seq 1 60000; sleep 1; seq 1 60000']
YAML
for k in 0 1; do seq $((k * 7)) 120000 >"$tmp/want$k"; done
{ seq 1 60000; seq 1 60000; } >"$tmp/want_slow"
size0=$(stat -c %s "$tmp/want0")
[ "$size0" -gt $((4 * 65536)) ] || fail "det shards are not several chunks"

mount_fs "$mnt" "$store" "$pipes"
served() { xattr "$mnt" bytes_served; }
pushed() { xattr "$mnt" bytes_pushed; }
[ "$(pushed)" = 0 ] || fail "bytes_pushed at mount: $(pushed)"

# --- a cold read of each codec: exact, and no read reaches the daemon ---
for c in none snappy zstd; do
  s0=$(served) p0=$(pushed)
  cat "$mnt/det_$c/shard-00000" >"$tmp/got" || fail "cold read of det_$c"
  cmp "$tmp/got" "$tmp/want0" || fail "det_$c: bytes differ"
  # all of it pushed; a few pages may be paged out before the read
  [ $(( $(served) - s0 )) -lt $((size0 / 4)) ] ||
    fail "det_$c: $(( $(served) - s0 )) bytes read through the daemon"
  [ $(( $(pushed) - p0 )) = "$size0" ] ||
    fail "det_$c: pushed $(( $(pushed) - p0 )), want $size0"
  [ "$(stat -c %s "$mnt/det_$c/shard-00000")" = "$size0" ] || fail "det_$c: size"
done
[ "$(xattr "$mnt" chunks_decompressed)" = 0 ] || fail "cold reads decompressed chunks"
pass "cold reads of none, snappy and zstd: exact, every byte pushed into the kernel's pages"

# --- chunks larger than the push buffers, not whole pages ---
p0=$(pushed)
cat "$mnt/wide/shard-00000" >"$tmp/got" || fail "cold read of wide"
cmp "$tmp/got" "$tmp/want_wide" || fail "wide: bytes differ"
sizew=$(stat -c %s "$tmp/want_wide")
[ $(( $(pushed) - p0 )) = "$sizew" ] ||
  fail "wide: pushed $(( $(pushed) - p0 )), want $sizew"
pass "chunks of 3000000 bytes across the 2 MiB push buffers: exact, every byte pushed"

# --- mmap as the first access of a cold shard ---
"$py" - "$mnt/det_zstd/shard-00001" "$tmp/want1" <<'PY' || fail "mmap of a cold shard"
import mmap, sys
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    got = m[:]
    m.close()
assert got == open(sys.argv[2], "rb").read(), "mmap read other bytes"
PY
pass "mmap of a cold shard: exact"

# --- stat, ls -l and a listing while it computes keep the pages ---
# They see the bytes pushed so far: a size of 0 would make the kernel drop
# every page pushed. (How many pages are read through the daemon says
# less here: this machine's memory manager pages out page cache left
# unread for about a second, as the first burst's is.)
cat "$mnt/slow/shard-00000" >"$tmp/got_slow" &
reader=$!
: >"$tmp/sizes"
for _ in $(seq 1 30); do
  stat -c %s "$mnt/slow/shard-00000" >>"$tmp/sizes" 2>/dev/null
  ls -l "$mnt/slow/" >/dev/null 2>&1
  sleep 0.05
done
wait "$reader" || fail "read of slow"
cmp "$tmp/got_slow" "$tmp/want_slow" || fail "slow: bytes differ"
mid=$(awk -v n="$(stat -c %s "$tmp/want_slow")" '$1 > 0 && $1 < n' "$tmp/sizes" | sort -un)
[ -n "$mid" ] || fail "slow: no stat during the computation saw the bytes pushed: $(sort -un "$tmp/sizes" | tr '\n' ' ')"
for v in $mid; do [ $((v % 4096)) = 0 ] || fail "slow: a size of $v pushed, not whole pages"; done
pass "stat, ls -l and listings during the computation see the bytes pushed so far ($(echo $mid)); the read is exact"

# --- a failed attempt's longer pages are never read ---
r=$mnt/rnd/shard-00000
touch "$pipes/fail"
cat "$r" >/dev/null 2>&1 && fail "a failing stage was served"
rm "$pipes/fail"
p0=$(pushed) s0=$(served)
# first without a stat: open and read straight away
"$py" - "$r" "$pipes/last.0" <<'PY' || fail "read after a failed attempt"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
got = b""
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    got += b
os.close(fd)
want = open(sys.argv[2], "rb").read()
assert len(want) == 100000, len(want)
assert got == want, "read %d bytes, want the 100000 of the new attempt" % len(got)
PY
[ "$(stat -c %s "$r")" = 100000 ] || fail "size after a failed attempt: $(stat -c %s "$r")"
cmp "$r" "$pipes/last.0" || fail "read after a stat: bytes differ"
[ $(( $(pushed) - p0 )) = 100000 ] || fail "the new attempt pushed $(( $(pushed) - p0 ))"
# all kept but the last partial page (the kernel marks a partial page
# read only at what it takes for the end of the file, which still is the
# failed attempt's until the next stat) and what is paged out meanwhile
[ $(( $(served) - s0 )) -lt 25000 ] ||
  fail "the new attempt's bytes read again through the daemon: $(( $(served) - s0 ))"
pass "a failed attempt's 300000 bytes never read: the next one's 100000 exactly"

# --- rm, and the recomputed bytes replace the old pages ---
cp "$pipes/last.0" "$tmp/rnd-a"
rm "$r" || fail "rm of rnd"
cat "$r" >"$tmp/rnd-b" || fail "read after rm"
cmp "$tmp/rnd-b" "$pipes/last.0" || fail "after rm: not the new computation's bytes"
cmp -s "$tmp/rnd-b" "$tmp/rnd-a" && fail "the stage gave the same bytes twice"
pass "after rm, the new computation's bytes, not the old pages"

# --- a descriptor on the old computation keeps its bytes ---
"$py" - "$r" "$pipes/last.0" <<'PY' || fail "rm and recompute with a descriptor open"
import os, sys
path, last = sys.argv[1:]
old = open(last, "rb").read()
f = open(path, "rb", buffering=0)
head = f.read(30000)
os.unlink(path)
with open(path, "rb") as g:
    new = g.read()
assert new == open(last, "rb").read(), "not the new computation's bytes"
assert new != old, "the stage gave the same bytes twice"
rest = f.read()
assert head + rest == old, "the old descriptor read other bytes"
PY
pass "a descriptor on the old computation keeps its bytes; the new one is exact"
umount_fs "$mnt" "$mpid"

# --- -o nopush: the pages are left to reads ---
store2=$tmp/store2 mnt2=$tmp/mnt2
mount_fs "$mnt2" "$store2" "$pipes" -o nopush
cat "$mnt2/det_zstd/shard-00000" >"$tmp/got" || fail "nopush: cold read"
cmp "$tmp/got" "$tmp/want0" || fail "nopush: bytes differ"
[ "$(xattr "$mnt2" bytes_pushed)" = 0 ] || fail "nopush: pushed $(xattr "$mnt2" bytes_pushed)"
[ "$(xattr "$mnt2" bytes_served)" = "$size0" ] ||
  fail "nopush: served $(xattr "$mnt2" bytes_served), want $size0"
[ "$(xattr "$mnt2" chunks_tapped)" -gt 0 ] || fail "nopush: nothing tapped"
pass "-o nopush: nothing pushed, the first read served by the daemon from the tap"
umount_fs "$mnt2" "$mpid"

# --- -o push_max: a push that stops mid-chunk leaves no half page ---
store3=$tmp/store3 mnt3=$tmp/mnt3
mount_fs "$mnt3" "$store3" "$pipes" -o push_max=1MiB
cat "$mnt3/cut/shard-00000" >"$tmp/got" || fail "push_max: cold read"
cmp "$tmp/got" "$tmp/want_cut" || fail "push_max: bytes differ where the push stopped"
p3=$(xattr "$mnt3" bytes_pushed) s3=$(xattr "$mnt3" bytes_served)
[ "$p3" -gt 0 ] && [ "$p3" -le 1048576 ] && [ $((p3 % 4096)) = 0 ] ||
  fail "push_max: pushed $p3, want whole pages, at most 1 MiB"
[ $((p3 + s3)) -ge "$(stat -c %s "$tmp/want_cut")" ] || fail "push_max: pushed $p3 + served $s3"
pass "-o push_max=1MiB: whole pages pushed up to it ($p3 bytes), the rest read through the daemon, exact"
umount_fs "$mnt3" "$mpid"

# --- SIGTERM while a push is under way: every job ends before /dev/fuse
# is closed (a store after the close wrote to a descriptor libfuse had
# closed: "writing device: Bad file descriptor", and with the number
# reused, into another file of the daemon's) ---
store4=$tmp/store4 mnt4=$tmp/mnt4
mount_fs "$mnt4" "$store4" "$pipes" -o push_max=1GiB
cat "$mnt4/endless/shard-00000" >/dev/null 2>&1 &
reader=$!
pushing() { [ "$(xattr "$mnt4" bytes_pushed)" -gt $((8 << 20)) ]; }
wait_for 20 pushing ||
  fail "endless: nothing pushed: $(xattr "$mnt4" bytes_pushed)"
lines=$(wc -l <"$log")
kill -TERM "$mpid"
wait_for 60 pid_gone "$mpid" || fail "matfs still runs 60 s after SIGTERM"
wait "$mpid" || fail "matfs exited $? after SIGTERM during a push"
wait "$reader" && fail "endless: the reader's open succeeded"
tail -n +"$((lines + 1))" "$log" >"$tmp/log4"
! grep -q 'writing device' "$tmp/log4" ||
  fail "a store or reply after /dev/fuse was closed: $(grep 'writing device' "$tmp/log4" | head -2)"
pass "SIGTERM during a push: every job ended before /dev/fuse was closed, exit 0"
