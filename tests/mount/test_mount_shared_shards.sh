#!/usr/bin/env bash
# test_mount_shared_shards.sh - shards shared between snapshots (DESIGN.md,
# "Shards shared between snapshots"; docs/spec.md, "The shard
# fingerprint"): appending an input to a one-shard-per-input corpus runs
# the stage once, for the new shard, and every byte equals the stage run
# by hand; with a fixed `shards: N`, an input sorting last recomputes the
# one shard it lands in, and with `assign: hash` one sorting in the middle
# does; adding `records` to a spec runs no stage and
# builds the index from the stored bytes (its batches read); removing
# the old snapshot leaves the new one whole; a donor file that does not
# read is computed instead, never served; another owner's spec with the
# same shard fingerprints reuses nothing; gc sweeps the hints of data
# no longer there.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

user=mfshare$$
useradd --no-create-home --shell /usr/sbin/nologin --user-group "$user" ||
  fail "useradd $user"
trap 'cleanup; userdel "$user" 2>/dev/null; groupdel "$user" 2>/dev/null' EXIT
chmod 755 "$tmp"
mkdir -p "$tmp/pipes" "$tmp/in" "$tmp/fixed"
for i in a b c; do seq 1 2000 | sed "s/^/$i /" >"$tmp/in/$i.txt"; done
for i in 1 2 3 4 5; do seq 1 500 | sed "s/^/f$i /" >"$tmp/fixed/$i.txt"; done
chmod -R a+rX "$tmp/in" "$tmp/fixed"
# the stage counts its runs per pipeline
stage='[sh, -c, "echo x >>$0; cat", CALLS]'
spec() { # spec NAME INPUTS [EXTRA]: a cat pipeline counting into calls.NAME
  printf 'name: %s\ninputs: %s\nstages:\n  - exec: %s\n%s' "$1" "$2" \
    "${stage/CALLS/$tmp/calls.$1}" "${3:-}" >"$tmp/pipes/$1.yaml.new"
  mv "$tmp/pipes/$1.yaml.new" "$tmp/pipes/$1.yaml"
}
spec grow '../in/*.txt'
spec fix '../fixed/*.txt' 'shards: 2
'
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o allow_other
wait_for 10 test -L "$mnt/grow" || fail "no grow name"
wait_for 10 test -L "$mnt/fix" || fail "no fix name"
cat "$mnt/grow"/* "$mnt/fix"/* >/dev/null || fail "first read"
[ "$(calls "$tmp/calls.grow")" = 3 ] || fail "first read ran $(calls "$tmp/calls.grow") stages"
old=$(readlink "$mnt/grow")

# one input appended: one stage run, every byte right
seq 1 300 | sed 's/^/d /' >"$tmp/in/d.txt"
chmod a+r "$tmp/in/d.txt"
wait_for 10 sh -c "[ \"\$(readlink '$mnt/grow')\" != $old ]" || fail "no new fingerprint"
for k in 0 1 2 3; do
  f=$(printf '%s/grow/shard-%05d' "$mnt" $k)
  cmp -s "$f" "$tmp/in/$(echo a b c d | cut -d' ' -f$((k + 1))).txt" ||
    fail "shard $k of the grown snapshot differs from its input"
done
[ "$(calls "$tmp/calls.grow")" = 4 ] || fail "the append ran $(($(calls "$tmp/calls.grow") - 3)) stages, not 1"
grep -q "reused shard 0 of ${old:0:12}" "$log" || fail "no reuse logged"
out=$("$matctl" --store "$tmp/store" stat grow) || fail "matctl stat"
for k in 0 1 2; do
  grep -q "shared with shard $k of $old" <<<"$out" || fail "stat: shard $k not shared: $out"
done
[ "$(grep -c 'shared with' <<<"$out")" = 3 ] || fail "stat: the new shard is shared: $out"
"$matctl" --store "$tmp/store" stat grow --json | "$py" -c '
import json, sys
d = json.load(sys.stdin)
w = [s["shared_with"] for s in d["shards"]]
assert [len(x) for x in w] == [1, 1, 1, 0], w
assert all(x[0]["fingerprint"] == sys.argv[1] and x[0]["shard"] == k
           for k, x in enumerate(w[:3])), w' "$old" || fail "stat --json shared_with"
pass "an appended input runs one stage; the other shards are reused, byte for byte; stat says with what"

# fixed shards: 2: input 6 sorts last and lands in shard 1 (5 mod 2)
seq 1 100 | sed 's/^/f6 /' >"$tmp/fixed/6.txt"
chmod a+r "$tmp/fixed/6.txt"
fixold=$(readlink "$mnt/fix")
wait_for 10 sh -c "[ \"\$(readlink '$mnt/fix')\" != $fixold ]" || fail "no new fix fingerprint"
cmp -s "$mnt/fix/shard-00000" <(cat "$tmp/fixed/1.txt" "$tmp/fixed/3.txt" "$tmp/fixed/5.txt") ||
  fail "fix shard 0"
cmp -s "$mnt/fix/shard-00001" <(cat "$tmp/fixed/2.txt" "$tmp/fixed/4.txt" "$tmp/fixed/6.txt") ||
  fail "fix shard 1"
[ "$(calls "$tmp/calls.fix")" = 3 ] || fail "fix ran $(calls "$tmp/calls.fix") stages, not 2 + 1"
pass "shards: 2, an input sorting last: only its shard computed"

# keep: 1, as a growing corpus has it: the older fingerprint stays until
# the new one is whole (its shards are stored from the older's), then goes
mkdir -p "$tmp/kept"
for i in a b c; do seq 1 300 | sed "s/^/k$i /" >"$tmp/kept/$i.txt"; done
chmod -R a+rX "$tmp/kept"
spec kept '../kept/*.txt' 'keep: 1
'
wait_for 10 test -L "$mnt/kept" || fail "no kept name"
cat "$mnt/kept"/* >/dev/null
kold=$(readlink "$mnt/kept")
seq 1 30 | sed 's/^/kd /' >"$tmp/kept/d.txt"
chmod a+r "$tmp/kept/d.txt"
wait_for 10 sh -c "[ \"\$(readlink '$mnt/kept')\" != $kold ]" || fail "no new kept fingerprint"
sleep 1.5 # expiry passes: the older one stays while the new one is not whole
[ -d "$mnt/$kold" ] || fail "keep: 1 expired the older fingerprint before the new one was whole"
cat "$mnt/kept"/* | cmp -s - <(cat "$tmp/kept/"{a,b,c,d}.txt) || fail "kept bytes"
[ "$(calls "$tmp/calls.kept")" = 4 ] || fail "keep: 1, one input appended: $(($(calls "$tmp/calls.kept") - 3)) stage runs, not 1"
wait_for 15 sh -c "! [ -e '$mnt/$kold' ]" || fail "the older fingerprint stays once the new one is whole"
pass "keep: 1 with a growing corpus: one stage run, the older fingerprint gone once the new one is whole"

# assign: hash: an input sorting in the middle computes its own shard only
mkdir -p "$tmp/hashed"
for i in a c e g; do seq 1 200 | sed "s/^/h$i /" >"$tmp/hashed/$i.txt"; done
chmod -R a+rX "$tmp/hashed"
spec hashed '../hashed/*.txt' 'shards: 3
assign: hash
'
wait_for 10 test -L "$mnt/hashed" || fail "no hashed name"
cat "$mnt/hashed"/* >/dev/null
[ "$(calls "$tmp/calls.hashed")" = 3 ] || fail "hashed: first read ran $(calls "$tmp/calls.hashed")"
hold=$(readlink "$mnt/hashed")
seq 1 50 | sed 's/^/hb /' >"$tmp/hashed/b.txt"
chmod a+r "$tmp/hashed/b.txt"
wait_for 10 sh -c "[ \"\$(readlink '$mnt/hashed')\" != $hold ]" || fail "no new hashed fingerprint"
"$py" - "$mnt/hashed" "$tmp/hashed" <<'PY' || fail "hashed shards' bytes"
import os, sys
snap, inputs = sys.argv[1:]
shards = [open(os.path.join(snap, f), "rb").read() for f in sorted(os.listdir(snap))]
files = {f: open(os.path.join(inputs, f), "rb").read() for f in sorted(os.listdir(inputs))}
assert sum(map(len, shards)) == sum(map(len, files.values()))
for f, data in files.items():  # each input whole in one shard, in order
    assert sum(sh.count(data) for sh in shards) == 1, f
PY
[ "$(calls "$tmp/calls.hashed")" = 4 ] ||
  fail "assign: hash, an input in the middle: $(($(calls "$tmp/calls.hashed") - 3)) stage runs, not 1"
pass "assign: hash: an input sorting in the middle computes its own shard alone"

# records added: no stage, the index built from the stored bytes
spec grow '../in/*.txt' 'records: lines
'
grew=$(readlink "$mnt/grow")
wait_for 10 sh -c "[ \"\$(readlink '$mnt/grow')\" != $grew ]" || fail "no records fingerprint"
cat "$mnt/grow"/* >/dev/null
[ "$(calls "$tmp/calls.grow")" = 4 ] || fail "adding records ran a stage"
[ "$(xattr "$mnt/grow" records)" = 6300 ] || fail "records: $(xattr "$mnt/grow" records)"
b=$mnt/grow/batches/100/seed-1/epoch-0/batch-000000
[ "$(wc -l <"$b")" = 100 ] || fail "a batch of the reused shards"
pass "records added to a spec: no stage ran, the index and batches are there"

# the old snapshots removed: the new one reads whole, from its own files
"$matctl" --store "$tmp/store" rm --force "$old" >/dev/null || fail "matctl rm old"
"$matctl" --store "$tmp/store" rm --force "$grew" >/dev/null || fail "matctl rm grew"
sync
echo 3 >/proc/sys/vm/drop_caches
cat "$mnt/grow"/* | cmp -s - <(cat "$tmp/in/"{a,b,c,d}.txt) || fail "the new snapshot after rm of the old"
[ "$(calls "$tmp/calls.grow")" = 4 ] || fail "rm of the old made the new compute"
pass "removing the snapshots reused from leaves the new one whole"

# a donor that does not read: computed instead, never served
cur=$(readlink "$mnt/grow")
donor=$(find "$tmp/store/snapshots/$cur" -name 'shard-00001.mfs' | head -1)
[ -f "$donor" ] || fail "no donor file"
printf '\377' | dd of="$donor" bs=1 seek=200 conv=notrunc status=none
spec grow '../in/*.txt' 'records: lines
shuffle_window: 1KiB
'
wait_for 10 sh -c "[ \"\$(readlink '$mnt/grow')\" != $cur ]" || fail "no shuffle_window fingerprint"
cat "$mnt/grow"/* | cmp -s - <(cat "$tmp/in/"{a,b,c,d}.txt) || fail "bytes after a corrupt donor"
[ "$(calls "$tmp/calls.grow")" = 5 ] || fail "a corrupt donor: $(($(calls "$tmp/calls.grow") - 4)) stage runs, not 1"
grep -q "does not read" "$log" || fail "the corrupt donor is not logged"
pass "a donor whose chunk is corrupt is computed instead"

# another owner's spec of the same shard fingerprints reuses nothing
chmod 666 "$tmp/calls.grow"
spec theirs '../in/*.txt' 'records: lines
shuffle_window: 2KiB
'
sed -i "s|calls.theirs|calls.grow|" "$tmp/pipes/theirs.yaml"
chown "$user:$user" "$tmp/pipes/theirs.yaml"
wait_for 10 test -L "$mnt/theirs" || fail "no theirs name"
cat "$mnt/theirs"/* | cmp -s - <(cat "$tmp/in/"{a,b,c,d}.txt) || fail "theirs' bytes"
[ "$(calls "$tmp/calls.grow")" = 9 ] || fail "another owner's spec ran $(($(calls "$tmp/calls.grow") - 5)) stages, not 4"
pass "another owner's spec reuses no one's data"

# one owner, two folders: a contributor who writes one folder's inputs,
# with another folder's relative paths, sizes and times, has no byte of
# hers served in the other folder's snapshot
mkdir -p "$tmp/srv/a/raw" "$tmp/srv/team/raw"
printf 'root-only line %s\n' 1 2 3 4 >"$tmp/srv/a/raw/a.txt"
chmod 600 "$tmp/srv/a/raw/a.txt"
chown "$user:$user" "$tmp/srv/team/raw"
sz=$(stat -c %s "$tmp/srv/a/raw/a.txt")
ns=$(stat -c %.9Y "$tmp/srv/a/raw/a.txt")
setpriv --reuid="$user" --regid="$user" --clear-groups sh -c \
  "head -c $sz /dev/zero | tr '\\0' U >'$tmp/srv/team/raw/a.txt'; touch -d @$ns '$tmp/srv/team/raw/a.txt'" ||
  fail "the contributor's file"
printf 'name: fa\ninputs: raw/*.txt\nstages:\n  - exec: [tr, a-z, A-Z]\n' >"$tmp/srv/a/fa.yaml"
printf 'name: fteam\ninputs: raw/*.txt\nstages:\n  - exec: [tr, a-z, A-Z]\nrecords: lines\n' >"$tmp/srv/team/fteam.yaml"
ln -s "$tmp/srv/a/fa.yaml" "$tmp/pipes/fa.yaml"
ln -s "$tmp/srv/team/fteam.yaml" "$tmp/pipes/fteam.yaml"
wait_for 10 test -L "$mnt/fa" || fail "no fa name"
wait_for 10 test -L "$mnt/fteam" || fail "no fteam name"
setpriv --reuid="$user" --regid="$user" --clear-groups cat "$mnt/fteam/shard-00000" >/dev/null ||
  fail "the contributor's read"
tr a-z A-Z <"$tmp/srv/a/raw/a.txt" | cmp -s - "$mnt/fa/shard-00000" ||
  fail "another folder's data served in fa: $(head -c 40 "$mnt/fa/shard-00000")"
pass "one owner, two folders: no data of one folder's inputs reused in the other"

# every snapshot's data removed: gc sweeps the hints that name it
[ "$(ls "$tmp/store/shared" | wc -l)" -ge 4 ] || fail "no hints in the store"
for fp in $(ls "$tmp/store/snapshots"); do
  "$matctl" --store "$tmp/store" rm --force "$fp" >/dev/null || fail "matctl rm $fp"
done
out=$("$matctl" --store "$tmp/store" gc) || fail "matctl gc"
grep -Eq ', [1-9][0-9]* stale reuse hints$' <<<"$out" || fail "gc: $out"
[ -z "$(ls "$tmp/store/shared")" ] || fail "hints left: $(ls "$tmp/store/shared")"
pass "gc sweeps the hints of data no longer there"
umount_fs "$mnt" "$mpid"
