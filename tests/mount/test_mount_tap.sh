#!/usr/bin/env bash
# test_mount_tap.sh - the first reader of a shard the daemon computes gets
# the bytes the stages just produced from the chunk cache, with no
# decompression (the root's user.matfs.chunks_decompressed and
# .chunks_tapped count), and those bytes are exact; a shard computed by
# another process is decompressed as before; after rm (or a failed
# attempt) a nondeterministic stage's new output is read back exactly,
# never mixed with chunks of the computation before, even while a
# descriptor on the old one is still reading. Mounted with -o nopush.
. "${MF_SOURCE_ROOT:?}/tests/mount/lib.sh" || exit 1

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1 2; do printf 'input %d\n' $k >"$pipes/in/$k.txt"; done
# det: 3 shards of 16 KiB chunks (shard 2 empty); rnd: random bytes each
# time, a copy kept in last.K, failing while the file `fail` exists.
cat >"$pipes/det.yaml" <<'YAML'
name: det
inputs: in/*.txt
chunk_size: 16KiB
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'if [ "$MATFS_SHARD" = 2 ]; then cat >/dev/null; else cat; seq 1 60000; fi']
YAML
cat >"$pipes/rnd.yaml" <<'YAML'
name: rnd
inputs: in/0.txt
chunk_size: 16KiB
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'head -c 300000 /dev/urandom | tee last.$MATFS_SHARD; [ ! -e fail ]']
YAML
for k in 0 1; do
  ( cd "$pipes" && sh -c 'cat; seq 1 60000' <"in/$k.txt" ) >"$tmp/want$k"
done
chunks0=$(( ($(stat -c %s "$tmp/want0") + 16383) / 16384 ))
# -o nopush: the first reads go through the daemon (with pages pushed
# into the kernel's cache, test_mount_push.sh, none would)
mount_fs "$mnt" "$store" "$pipes" -o nopush
d=$mnt/det r=$mnt/rnd

dec() { xattr "$mnt" chunks_decompressed; }
tapped() { xattr "$mnt" chunks_tapped; }
[ "$(dec)" = 0 ] && [ "$(tapped)" = 0 ] || fail "counters at mount: $(dec) $(tapped)"

# --- a cold read: stages run, nothing decompressed, exact bytes ---
cat "$d/shard-00000" >"$tmp/got0" || fail "cold read of det/0"
cmp "$tmp/got0" "$tmp/want0" || fail "cold read of det/0: bytes differ"
[ "$(dec)" = 0 ] || fail "cold read decompressed $(dec) chunks"
[ "$(tapped)" = "$chunks0" ] || fail "tapped $(tapped) chunks, want $chunks0"
[ "$(stat -c %s "$tmp/want0")" -gt $((3 * 16384)) ] || fail "det/0 is not several chunks"
cat "$d/shard-00002" >"$tmp/got2" || fail "cold read of the empty det/2"
[ ! -s "$tmp/got2" ] || fail "det/2 is not empty"
pass "cold read: exact bytes, $chunks0 chunks from the tap, none decompressed"

# --- computed by another process: read back from the store, decompressed ---
"$matctl" --store "$store" warm det >/dev/null 2>&1 || fail "matctl warm det"
t0=$(tapped)
cmp "$d/shard-00001" "$tmp/want1" || fail "det/1 computed by matctl"
[ "$(dec)" -gt 0 ] || fail "a shard computed elsewhere was not decompressed"
[ "$(tapped)" = "$t0" ] || fail "tapped chunks of a shard computed elsewhere"
pass "a shard computed by another process is decompressed: $(dec) chunks"

# --- nondeterministic stage: rm and recompute never mixes computations ---
dec0=$(dec)
cat "$r/shard-00000" >"$tmp/rnd-a" || fail "cold read of rnd"
cmp "$tmp/rnd-a" "$pipes/last.0" || fail "rnd: first read is not the stage's output"
"$py" - "$r/shard-00000" "$tmp/rnd-a" "$pipes/last.0" "$tmp/rnd-b" <<'PY' || fail "rm and recompute of rnd"
import os, subprocess, sys
path, old_path, last, out = sys.argv[1:]
old = open(old_path, "rb").read()
f = open(path, "rb", buffering=0)  # a descriptor on computation A
head = f.read(40000)
os.unlink(path)                    # rm: the next open computes B
with open(path, "rb") as g:
    new = g.read()
assert new == open(last, "rb").read(), "B is not the stage's new output"
assert new != old, "the stage gave the same bytes twice"
rest = b""
while True:
    b = f.read(65536)
    if not b:
        break
    rest += b
assert head + rest == old, "the descriptor on A read other bytes"
f.close()
open(out, "wb").write(new)
PY
[ "$(dec)" = "$dec0" ] || fail "rnd reads decompressed $(( $(dec) - dec0 )) chunks"
pass "after rm, a nondeterministic stage's new bytes exactly; an old descriptor its own"

# --- a failed attempt's chunks are never served ---
touch "$pipes/fail"
rm "$r/shard-00000" || fail "rm of rnd"
cat "$r/shard-00000" >/dev/null 2>&1 && fail "a failing stage was served"
cmp -s "$pipes/last.0" "$tmp/rnd-b" && fail "the failed attempt wrote nothing new"
rm "$pipes/fail"
cat "$r/shard-00000" >"$tmp/rnd-c" || fail "read after the failure"
cmp "$tmp/rnd-c" "$pipes/last.0" || fail "read after the failure: bytes differ"
[ "$(xattr "$r/shard-00000" attempts)" = 4 ] || fail "attempts: $(xattr "$r/shard-00000" attempts)"
[ "$(dec)" = "$dec0" ] || fail "rnd reads decompressed chunks"
pass "a failed attempt's chunks dropped; the next one read exactly"
umount_fs "$mnt" "$mpid"
