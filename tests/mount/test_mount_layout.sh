#!/usr/bin/env bash
# test_mount_layout.sh - the tree and reading it: the root's fingerprint
# directories and name symlinks, shard names and sizes, stat/ls/getfattr
# never computing, bytes equal to the stages run by hand through cat, cmp,
# dd, cp and a Python mmap (fstat right after open gives the exact size),
# xattrs, ENAMETOOLONG, and a remount serving from the store without
# calling any stage.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store mnt=$tmp/mnt pipes=$tmp/ex/pipelines
cp -r "$src/examples" "$tmp/ex"
mkdir -p "$tmp/ex/data2"
for k in 0 1 2; do printf 'input %d\n' "$k" >"$tmp/ex/data2/in$k.txt"; done
cat >"$pipes/count.yaml" <<'YAML'
name: count
inputs: ../data2/*.txt
chunk_size: 64KiB
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'echo "$MATFS_SHARD" >> calls; cat; seq 1 60000']
YAML
calls=$pipes/calls

help=$("$matfs" --help) || fail "--help"
grep -q 'usage: matfs' <<<"$help" || fail "--help"
version=$("$matfs" --version) || fail "--version"
grep -q '^matfs [0-9]' <<<"$version" || fail "--version"
"$matfs" --bogus 2>/dev/null && fail "an unknown option was accepted"

mount_fs "$mnt" "$store" "$pipes"

# --- the root: a directory per fingerprint, a relative symlink per name ---
for name in tokens count; do
  t=$(readlink "$mnt/$name") || fail "no symlink '$name': $(ls -l "$mnt")"
  [[ $t =~ ^[0-9a-f]{64}$ ]] || fail "symlink $name -> '$t' is not a bare fingerprint"
  [ -d "$mnt/$t" ] || fail "$name -> $t is no directory"
  [ "$(stat -c %A "$mnt/$t")" = dr-xr-xr-x ] || fail "mode of $t: $(stat -c %A "$mnt/$t")"
done
cfp=$(readlink "$mnt/count")
[ "$cfp" = "$("$matctl" fingerprint "$pipes/count.yaml")" ] || fail "count -> $cfp, not matctl's fingerprint"
[ "$(ls "$mnt" | wc -l)" -eq 4 ] || fail "root lists: $(ls "$mnt")"
pass "root: fingerprint directories and relative name symlinks"

# --- listing, stat and xattrs never compute ---
[ "$(ls "$mnt/count/")" = "$(printf 'shard-00000\nshard-00001\nshard-00002')" ] ||
  fail "count lists: $(ls "$mnt/count/")"
[ "$(ls "$mnt/tokens/")" = "$(printf 'shard-00000.u32\nshard-00001.u32')" ] ||
  fail "tokens lists: $(ls "$mnt/tokens/")"
ls -l "$mnt/count/" "$mnt/tokens/" >/dev/null || fail "ls -l"
[ "$(stat -c %s "$mnt/count/shard-00001")" -eq 0 ] || fail "absent shard has a size"
[ "$(stat -c %A "$mnt/count/shard-00001")" = -r--r--r-- ] || fail "shard mode"
[ "$(xattr "$mnt/count/shard-00001" state)" = absent ] || fail "state of an absent shard"
getfattr -d "$mnt/count" "$mnt/count/shard-00000" >/dev/null 2>&1
[ "$(xattr "$mnt/count" state)" = absent ] || fail "snapshot state"
[ "$(xattr "$mnt/count" shards)" = 3 ] || fail "snapshot shards"
[ "$(calls "$calls")" -eq 0 ] || fail "ls/stat/getfattr ran a stage"
stat "$mnt/count/shard-00003" 2>/dev/null && fail "shard 3 of 3 exists"
pass "ls -l, stat and getfattr list every shard and never compute"

# --- bytes against the stages run by hand ---
for k in 0 1; do
  ( cd "$pipes" && cat $(ls ../data/*.txt | awk -v k=$k '(NR - 1) % 2 == k') |
    tr A-Z a-z | python3 tokenize.py --vocab 65536 ) >"$tmp/tok$k"
  [ -s "$tmp/tok$k" ] || fail "reference tokens $k empty"
  cmp "$mnt/tokens/shard-0000$k.u32" "$tmp/tok$k" || fail "tokens shard $k differs"
done
for k in 0 1 2; do
  ( cd "$pipes" && sh -c 'cat; seq 1 60000' <"$tmp/ex/data2/in$k.txt" ) >"$tmp/want$k"
done
# an absent shard, its size 0 just cached by the kernel: open materializes,
# then fstat is exact and mmap sees every byte
"$py" - "$mnt/count/shard-00001" "$tmp/want1" <<'PY' || fail "fstat/mmap after open"
import mmap, os, sys
want = open(sys.argv[2], "rb").read()
assert os.stat(sys.argv[1]).st_size == 0
fd = os.open(sys.argv[1], os.O_RDONLY)
st = os.fstat(fd)
assert st.st_size == len(want), (st.st_size, len(want))
with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
    assert mm[:] == want, "mmap bytes differ"
assert open(sys.argv[1], "rb").read() == want, "read() differs"
os.close(fd)
PY
[ "$(calls "$calls")" -eq 1 ] || fail "shard 1: $(calls "$calls") stage calls"
cat "$mnt/count/shard-00000" >"$tmp/got0" && cmp "$tmp/got0" "$tmp/want0" || fail "cat shard 0"
cp "$mnt/count/shard-00002" "$tmp/got2" && cmp "$tmp/got2" "$tmp/want2" || fail "cp shard 2"
dd if="$mnt/count/shard-00002" bs=4096 skip=20 count=7 status=none >"$tmp/dd" || fail "dd"
dd if="$tmp/want2" bs=4096 skip=20 count=7 status=none | cmp - "$tmp/dd" || fail "dd range differs"
dd if="$mnt/count/shard-00000" bs=1000 skip=300 status=none | cmp - <(tail -c +300001 "$tmp/want0") ||
  fail "dd tail differs"
[ "$(stat -c %s "$mnt/count/shard-00002")" -eq "$(stat -c %s "$tmp/want2")" ] || fail "stat size"
[ "$(calls "$calls")" -eq 3 ] || fail "3 shards read: $(calls "$calls") stage calls"
pass "cat, cmp, cp, dd, read() and mmap give the stages' bytes; fstat is exact after open"

# --- xattrs of a materialized shard and of the snapshot ---
# the reads can end before the commits of what they read (served sealed)
wait_for 20 eval '[ "$(xattr "$mnt/count" materialized)" = 3 ]' ||
  fail "materialized count: $(xattr "$mnt/count" materialized)"
[ "$(xattr "$mnt/count/shard-00000" state)" = materialized ] || fail "state"
[[ $(xattr "$mnt/count/shard-00000" run_id) =~ ^[0-9a-f]{32}$ ]] || fail "run_id"
[ "$(xattr "$mnt/count/shard-00000" raw_bytes)" -eq "$(stat -c %s "$tmp/want0")" ] || fail "raw_bytes"
[ "$(xattr "$mnt/count" materialized)" = 3 ] || fail "materialized count"
[ "$(xattr "$mnt/count" state)" = materialized ] || fail "snapshot state"
[ "$(xattr "$mnt/count" fingerprint)" = "$cfp" ] || fail "fingerprint xattr"
attrs=$(getfattr -d "$mnt/count/shard-00000" 2>/dev/null) ||
  fail "getfattr -d: $(getfattr -d "$mnt/count/shard-00000" 2>&1)"
grep -q 'user.matfs.state="materialized"' <<<"$attrs" ||
  fail "getfattr -d: $(getfattr -d "$mnt/count/shard-00000" 2>&1)"
pass "xattrs: state, run_id, sizes, snapshot counts"

# --- names over 255 bytes ---
long=$(printf 'a%.0s' $(seq 1 256))
"$py" - "$mnt" "$long" <<'PY' || fail "ENAMETOOLONG"
import errno, os, sys
for p in (os.path.join(sys.argv[1], sys.argv[2]),
          os.path.join(sys.argv[1], "count", sys.argv[2])):
    try:
        os.stat(p)
        sys.exit("stat of a 256-byte name succeeded")
    except OSError as e:
        assert e.errno == errno.ENAMETOOLONG, e
PY
pass "names over 255 bytes: ENAMETOOLONG"

# --- a remount serves from the store without calling the stages ---
umount_fs "$mnt" "$mpid"
mount_fs "$mnt" "$store" "$pipes"
[ "$(stat -c %s "$mnt/count/shard-00001")" -eq "$(stat -c %s "$tmp/want1")" ] ||
  fail "size after remount"
for k in 0 1 2; do cmp "$mnt/count/shard-0000$k" "$tmp/want$k" || fail "remount: shard $k"; done
cmp "$mnt/tokens/shard-00000.u32" "$tmp/tok0" || fail "remount: tokens"
[ "$(calls "$calls")" -eq 3 ] || fail "remount called stages: $(calls "$calls")"
umount_fs "$mnt" "$mpid"
pass "a remount serves from the store without calling the stages"
