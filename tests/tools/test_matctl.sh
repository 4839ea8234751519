#!/usr/bin/env bash
# test_matctl.sh - matctl end to end with ordinary programs: the bundled
# example against its stages run by hand, 16 concurrent readers, ls/stat
# (tables and JSON), verify after corruption, rm, gc, fingerprint, errors
# and exit codes.
set -uo pipefail
src=${MF_SOURCE_ROOT:?} build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
tmp=$(mktemp -d /tmp/mf-matctl.XXXXXX)
holder=
# removing $tmp also ends the stage a holder waits in (see keep below)
trap 'rm -rf "$tmp"; [ -z "$holder" ] || wait "$holder" 2>/dev/null' EXIT
store=$tmp/store
m() { "$matctl" --store "$store" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

# --- the bundled example, byte for byte against the stages by hand ---
cp -r "$src/examples" "$tmp/ex"
spec=$tmp/ex/pipelines/tokens.yaml
m warm "$spec" -j 2 >"$tmp/warm.out" || fail "warm exited $?"
grep -q "2/2 shards materialized" "$tmp/warm.out" || fail "warm output: $(cat "$tmp/warm.out")"
for k in 0 1; do
  m cat tokens $k >"$tmp/got$k" || fail "cat $k"
  ( cd "$tmp/ex/pipelines"
    cat $(ls ../data/*.txt | awk -v k=$k '(NR - 1) % 2 == k') \
      | tr A-Z a-z | python3 tokenize.py --vocab 65536 ) >"$tmp/want$k"
  [ -s "$tmp/want$k" ] || fail "reference output $k is empty"
  cmp "$tmp/got$k" "$tmp/want$k" || fail "shard $k differs from the stages by hand"
done
pass "example matches its stages run by hand"

m ls | grep -E '^tokens +[0-9a-f]{12} +2/2 ' >/dev/null || fail "ls: $(m ls)"
m ls --json | /usr/bin/python3 -c '
import json, sys
v = json.load(sys.stdin)
assert len(v) == 1 and v[0]["name"] == "tokens", v
assert v[0]["materialized"] == 2 and v[0]["shards"] == 2, v
assert v[0]["raw_bytes"] > 0 and v[0]["stored_bytes"] > 0, v
' || fail "ls --json"
m stat tokens --json | /usr/bin/python3 -c '
import json, sys
v = json.load(sys.stdin)
assert [s["state"] for s in v["shards"]] == ["materialized"] * 2, v
assert all(len(s["run_id"]) == 32 for s in v["shards"]), v
' || fail "stat --json"
pass "ls and stat, tables and JSON"

# --- fingerprint ---
fp=$(m fingerprint "$spec") || fail "fingerprint"
[[ $fp =~ ^[0-9a-f]{64}$ ]] || fail "fingerprint '$fp'"
out=$(m fingerprint "$spec" --explain) || fail "--explain lists no stage"
grep -q 'stage\[1\]' <<<"$out" || fail "--explain lists no stage"
grep -Eq '^  [0-9a-f]{64}  shard\[0\]$' <<<"$out" || fail "--explain lists no shard fingerprint"
out=$(m ls --json) || fail "warm registered another fingerprint than 'fingerprint' prints"
grep -q "$fp" <<<"$out" || fail "warm registered another fingerprint than 'fingerprint' prints"
pass "fingerprint and --explain"

# --- a unique fingerprint prefix of 8+ hex digits stands for the fingerprint ---
out=$(m stat "${fp:0:8}" --json) || fail "stat by an 8-digit prefix: $(m stat "${fp:0:8}" 2>&1)"
grep -q "\"fingerprint\":\"$fp\"" <<<"$out" ||
  fail "stat by an 8-digit prefix: $(m stat "${fp:0:8}" 2>&1)"
m cat "${fp:0:12}" 1 | cmp -s - "$tmp/want1" || fail "cat by a 12-digit prefix"
m verify "${fp^^}" >/dev/null || fail "verify by an upper-case fingerprint"
out=$(m stat "${fp:0:7}" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == *"a fingerprint prefix needs at least 8 hex digits"* ]] ||
  fail "7-digit prefix: rc=$rc '$out'"
# the twin shares exactly 8 digits: its 9th differs from the fingerprint's
d=0; [ "${fp:8:1}" = 0 ] && d=1
twin=${fp:0:8}$(printf "%056d" 0 | tr 0 $d)
sqlite3 "$store/catalog.db" "INSERT INTO snapshots (fp, name, shards, spec_path,
  compression, chunk_size, pending_expiry, created) SELECT '$twin', 'twin',
  shards, spec_path, compression, chunk_size, pending_expiry, created
  FROM snapshots WHERE fp = '$fp'" || fail "adding a twin row"
out=$(m stat "${fp:0:8}" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == *"fingerprint prefix '${fp:0:8}' is ambiguous"* ]] &&
  [[ $out == *"$fp (tokens)"* ]] && [[ $out == *"$twin (twin)"* ]] ||
  fail "ambiguous prefix: rc=$rc '$out'"
m stat "${fp:0:9}" >/dev/null || fail "a longer prefix is unique again"
out=$(m rm "${twin:0:10}") || fail "rm by prefix"
grep -qx "expired $twin" <<<"$out" || fail "rm by prefix"
# a pipeline named like the 12 digits ls prints of another fingerprint:
# neither wins, so rm, warm or verify never act on the other snapshot
sqlite3 "$store/catalog.db" "INSERT INTO snapshots (fp, name, shards, spec_path,
  compression, chunk_size, pending_expiry, created) SELECT '$twin', '${fp:0:12}',
  shards, spec_path, compression, chunk_size, pending_expiry, created
  FROM snapshots WHERE fp = '$fp'" || fail "adding a hex-named row"
out=$(m stat "${fp:0:12}" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == *"'${fp:0:12}' is ambiguous"* ]] &&
  [[ $out == *"$fp (tokens)"* ]] && [[ $out == *"$twin (${fp:0:12})"* ]] ||
  fail "a name that is another fingerprint's prefix: rc=$rc '$out'"
out=$(m rm "$twin") || fail "rm of the hex-named row"
grep -qx "expired $twin" <<<"$out" || fail "rm of the hex-named row"
out=$(m cat "${fp:0:8}" 2 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: cat '${fp:0:8}': no shard 2: the snapshot has shards 0 to 1" ]] ||
  fail "cat out of range: rc=$rc '$out'"
pass "fingerprint prefixes, ambiguity, and the valid range of cat"

# --- a bare word is a pipeline or a fingerprint, never a file here; a
# word with a '/' or a .yaml/.yml ending is a spec file ---
cwd=$tmp/cwd
mkdir -p "$cwd/tokens" "$cwd/f" "$cwd/in"
printf 'x\n' >"$cwd/in/a.txt"
: >"$cwd/f/tokens"; : >"$cwd/f/${fp:0:12}"
for c in c.yaml c.yml images; do
  printf 'name: %s\ninputs: in/*.txt\nstages:\n  - exec: [/bin/sh, -c, cat, %s]\n' "${c//./-}" "$c" >"$cwd/$c"
done
pushd "$cwd" >/dev/null || fail "cd $cwd"
out=$(m stat tokens --json 2>&1)
grep -q "\"fingerprint\":\"$fp\"" <<<"$out" || fail "a folder ./tokens hid pipeline tokens: '$out'"
cd f || fail "cd $cwd/f"
m cat tokens 0 2>&1 | cmp -s - "$tmp/want0" ||
  fail "a file ./tokens hid pipeline tokens: $(m cat tokens 0 2>&1 | head -c 300)"
out=$(m stat "${fp:0:12}" --json 2>&1)
grep -q "\"fingerprint\":\"$fp\"" <<<"$out" || fail "a file ./${fp:0:12} hid the prefix: '$out'"
cd .. || fail "cd $cwd"
for c in c.yaml ./c.yaml c.yml "$cwd/c.yml"; do
  out=$(m stat "$c" --json 2>&1)
  grep -q "\"name\":\"c-y" <<<"$out" || fail "'$c' did not load the spec: '$out'"
done
out=$(m stat images 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: no pipeline named 'images'; to use the file 'images' as a spec file, write './images'" ]] ||
  fail "a bare word read the file ./images: rc=$rc '$out'"
out=$(m stat ./images --json 2>&1)
grep -q '"name":"images"' <<<"$out" || fail "./images did not load the spec: '$out'"
out=$(m stat nosuch.yaml 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: nosuch.yaml: cannot open: No such file or directory (an argument ending in .yaml or .yml is a spec file)" ]] ||
  fail "a missing nosuch.yaml: rc=$rc '$out'"
out=$(m stat nosuch 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: no pipeline named 'nosuch'" ]] || fail "unknown name: rc=$rc '$out'"
out=$(m stat "${fp:0:8}$d$d$d$d" 2>&1)
[[ $out == "matctl: no pipeline named '${fp:0:8}$d$d$d$d' and no fingerprint starting with it" ]] ||
  fail "unknown prefix: '$out'"
popd >/dev/null || fail "popd"
m rm c-yaml c-yml images >/dev/null || fail "rm of the specs of $cwd"
pass "names and fingerprints before files of the working directory; paths and .yaml are spec files"

# --- warm's progress bar on a terminal: right at the start and at the end ---
if command -v script >/dev/null; then
  mkdir -p "$tmp/w/in"
  for i in 1 2 3; do printf 'line %d\n' $i >"$tmp/w/in/$i.txt"; done
  printf 'name: bar\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$tmp/w/bar.yaml"
  # frames: what stands between carriage returns on the terminal
  frames() { script -qec "$matctl --store $store warm $tmp/w/bar.yaml" /dev/null |
    tr '\r' '\n' | grep '^\[' | sed 's/ *$//'; }
  frames >"$tmp/frames" || fail "warm on a terminal"
  bar0=$(printf '.%.0s' $(seq 30)) bar1=$(printf '#%.0s' $(seq 30))
  [ "$(head -1 "$tmp/frames")" = "[$bar0] 0/3 shards  0 B  --/s  ETA --:--" ] ||
    fail "first frame: $(head -1 "$tmp/frames")"
  last=$(tail -1 "$tmp/frames")
  grep -Eq "^\[$bar1\] 3/3 shards  21 B  [0-9.]+ (B|KiB|MiB)/s  ETA 0:00\$" <<<"$last" ||
    fail "last frame: $last"
  grep -Evq 'ETA (--:--|[0-9]+:[0-9]{2})$' "$tmp/frames" && fail "an ETA: $(cat "$tmp/frames")"
  # all done before: nothing computed, no rate, nothing left
  frames >"$tmp/frames" || fail "warm again on a terminal"
  [ "$(sort -u "$tmp/frames")" = "[$bar1] 3/3 shards  21 B  --/s  ETA 0:00" ] ||
    fail "warm of a warm snapshot: $(cat "$tmp/frames")"
  pass "warm's progress bar at the start and at the end"
fi

# --- --help, the man page, docs/matctl.md and the bash completion name
# every command and every option of tools/matctl.c's own tables ---
table() { sed -n "/$1/,/^};/p" "$src/tools/matctl.c" | grep -o '{"[a-z-]*"' | tr -d '{"'; }
cmds=$(table '^static const struct command commands\[\]')
longs=$(table 'static const struct option opts\[\]')
[ -n "$cmds" ] && [ -n "$longs" ] || fail "cannot read matctl.c's tables"
help=$(m --help) || fail "--help exited $?"
man1=$src/docs/man/matctl.1 md=$src/docs/matctl.md comp=$src/dist/bash-completion/matctl
comp_cmds=$(sed -n 's/^\s*local commands="\(.*\)"$/\1/p' "$comp")
for c in $cmds; do
  grep -Eq "^  $c( |$)" <<<"$help" || fail "--help lacks the command '$c'"
  grep -Eq "^(\.B[IR]* \"?|\\\\fB)$c( |\"|\\\\fR|$)" "$man1" || fail "matctl.1 lacks the command '$c'"
  grep -q "^| \`$c" "$md" || fail "docs/matctl.md lacks the command '$c'"
  grep -qw -- "$c" <<<"$comp_cmds" || fail "the completion lacks the command '$c'"
done
for o in $longs; do
  grep -q -- "--$o" <<<"$help" || fail "--help lacks --$o"
  grep -qF -- "\\-\\-${o//-/\\-}" "$man1" || fail "matctl.1 lacks --$o"
  grep -q -- "--$o" "$md" || fail "docs/matctl.md lacks --$o"
  grep -q -- "--$o" "$comp" || fail "the completion lacks --$o"
done
grep -q '^  expire \[--older-than DURATION\] \[--json\]' <<<"$help" || fail "--help: expire --json"
[ "$(m --version)" = "$(m -V)" ] && [[ $(m --version) == "matctl "[0-9]* ]] || fail "--version"
pass "--help, matctl(1), docs/matctl.md and the completion name every command and option"

# --- 16 concurrent readers, one computation ---
mkdir -p "$tmp/p/in"
printf 'hello\n' >"$tmp/p/in/a.txt"
cat >"$tmp/p/count.yaml" <<'YAML'
name: count
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo call >> calls; sleep 0.5; cat; head -c 300000 /dev/zero | tr "\0" x']
YAML
pids=()   # each reader names the spec file, so each registers it too
for i in $(seq 1 16); do m cat "$tmp/p/count.yaml" 0 >"$tmp/c$i" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent reader failed"; done
[ "$(wc -l <"$tmp/p/calls")" -eq 1 ] || fail "stages ran $(wc -l <"$tmp/p/calls") times"
for i in $(seq 2 16); do cmp -s "$tmp/c1" "$tmp/c$i" || fail "reader $i got other bytes"; done
[ "$(stat -c %s "$tmp/c1")" -eq 300006 ] || fail "size $(stat -c %s "$tmp/c1")"
pass "16 concurrent readers, one stage run"

# --- verify finds corruption, the next read recomputes ---
run=$(m stat count --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["shards"][0]["run_id"])')
cfp=$(m fingerprint "$tmp/p/count.yaml")
file=$store/snapshots/$cfp/$run/shard-00000.mfs
[ -f "$file" ] || fail "no shard file at $file"
size=$(stat -c %s "$file")
printf '\x55' | dd of="$file" bs=1 seek=$((size / 3)) conv=notrunc status=none
m verify count >"$tmp/verify.out"; rc=$?
[ $rc -eq 1 ] || fail "verify exited $rc on a corrupt shard"
grep -q 'shard 0: corrupt' "$tmp/verify.out" || fail "verify said: $(cat "$tmp/verify.out")"
m cat count 0 >"$tmp/again" || fail "cat after verify"
cmp -s "$tmp/again" "$tmp/c1" || fail "recomputed bytes differ"
[ "$(wc -l <"$tmp/p/calls")" -eq 2 ] || fail "expected one recomputation"
out=$(m verify count) || fail "verify after recompute"
grep -q 'shard 0: ok' <<<"$out" || fail "verify after recompute"
pass "verify finds corruption and the shard heals"

# --- errors and exit codes ---
out=$(m cat nosuch 0 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: no pipeline named 'nosuch'" ]] \
  || fail "unknown name: rc=$rc '$out'"
out=$(m frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && [[ $out == matctl:\ unknown\ command* ]] || fail "unknown command: rc=$rc"
printf 'name: bad\ninputs: in/*.txt\nshard: 2\nstages:\n  - exec: [cat]\n' >"$tmp/p/bad.yaml"
out=$(m fingerprint "$tmp/p/bad.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: $tmp/p/bad.yaml:3:1: unknown key 'shard'; did you mean 'shards'?" ]] \
  || fail "bad spec: rc=$rc '$out'"
cat >"$tmp/p/fails.yaml" <<'YAML'
name: fails
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo something broke >&2; exit 3']
YAML
out=$(m warm "$tmp/p/fails.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == *"exited with status 3"* ]] || fail "failing stage: rc=$rc '$out'"
[[ $out == *"exited with status 3: something broke"* ]] || fail "no last stderr line: '$out'"
out=$(m stats --json) || fail "catalog totals after a failed warm: $(m stats --json)"
grep -qE '"catalog": \{"materializations_started": [1-9][0-9]*, "materializations_failed": 1,' <<<"$out" ||
  fail "catalog totals after a failed warm: $(m stats --json)"
out=$(m stat fails) || fail "stat shows no stderr tail"
grep -q 'something broke' <<<"$out" || fail "stat shows no stderr tail"
out=$(m stat fails --json) || fail "failed state"
grep -q '"state":"failed"' <<<"$out" || fail "failed state"
pass "errors and exit codes"

# --- rm and gc ---
m rm count >/dev/null || fail "rm"
out=$(m ls) && grep -q '^count ' <<<"$out" && fail "rm left count listed"
[ -d "$store/snapshots/$cfp" ] && fail "rm left the store folder"
mkdir -p "$store/snapshots/$(printf '%064d' 7)"
out=$(m gc) || fail "gc"
grep -q 'removed 1 snapshot folders' <<<"$out" || fail "gc"
pass "rm and gc"

# --- gc never deletes what a lost catalog no longer knows ---
tfp=$(m fingerprint "$spec")
tdir=$store/snapshots/$tfp
trun=$(ls "$tdir" | grep -v metadata | head -1)
: >"$tdir/$trun/shard-00007.tmp"    # left by a run that died
out=$(m gc) || fail "gc kept a dead run's temp file"
grep -q '1 shard files' <<<"$out" || fail "gc kept a dead run's temp file"
[ -e "$tdir/$trun/shard-00007.tmp" ] && fail "temp file still there"
rm -f "$store"/catalog.db*
out=$(m gc)                           # a new catalog, indexed on open
[[ $out == "removed 0 snapshot folders, 0 run folders, 0 shard files, 0 stale reuse hints" ]] ||
  fail "gc on a lost catalog: $out"
[ -f "$tdir/$trun/shard-00000.mfs" ] || fail "gc deleted data of a lost catalog"
out=$(m stat tokens --json) || fail "not indexed"
grep -q '"state":"materialized"' <<<"$out" || fail "not indexed"
m fsck --rebuild >/dev/null || fail "rebuild"
m cat tokens 0 | cmp -s - "$tmp/want0" || fail "data after rebuild"
m rm "$tfp" >/dev/null || fail "rm by fingerprint"
[ -d "$tdir" ] && fail "rm FP left $tdir"
out=$(m rm "$tfp" 2>&1) && fail "rm of a fingerprint that is gone succeeded"
[[ $out == *"no snapshot $tfp in the catalog or the store"* ]] ||
  fail "rm of a gone fingerprint: $out"
pass "gc keeps a lost catalog's data and removes dead runs' temp files"
# --- expire applies the daemon's policy: keep, and what a live process
# serves counts as registered ---
kdir=$tmp/keep
mkdir -p "$kdir/in"
printf 'a\n' >"$kdir/in/0.txt"
printf 'b\n' >"$kdir/in/1.txt"
for v in A B C; do   # one name, three fingerprints; shard 1 waits on 'slow'
  cat >"$kdir/$v.yaml" <<YAML
name: kept
inputs: in/*.txt
shards: 2
keep: 1
stages:
  - exec: [/bin/sh, -c, 'while [ -e slow ] && [ "\$MATFS_SHARD" = 1 ]; do sleep 0.1; done; cat', $v]
YAML
done
fA=$(m fingerprint "$kdir/A.yaml") && fB=$(m fingerprint "$kdir/B.yaml") &&
  fC=$(m fingerprint "$kdir/C.yaml") || fail "fingerprints of keep specs"
kept() { m ls --json | /usr/bin/python3 -c '
import json, sys
print(" ".join(sorted(s["fingerprint"] for s in json.load(sys.stdin)
                      if s["name"] == "kept")))'; }
m cat "$kdir/A.yaml" 0 >/dev/null || fail "cat A"
sleep 1.1
m cat "$kdir/B.yaml" 0 >/dev/null || fail "cat B"
out=$(m expire) || fail "expire under keep"
[[ $out == "expired kept $fA by keep ("* ]] && [ "$(echo "$out" | wc -l)" -eq 1 ] ||
  fail "expire under keep: '$out'"
[ "$(kept)" = "$fB" ] || fail "after keep: $(kept)"
sleep 1.1
m cat "$kdir/C.yaml" 0 >/dev/null || fail "cat C"   # now the most recent
: >"$kdir/slow"
m cat "$kdir/B.yaml" 1 >/dev/null & holder=$!     # registers B and holds it
for i in $(seq 100); do
  out=$(m stat "$fB" --json) && grep -q '"index":1,"state":"running"' <<<"$out" && break
  sleep 0.1
done
out=$(m stat "$fB" --json) || fail "shard 1 of B is not running"
grep -q '"index":1,"state":"running"' <<<"$out" ||
  fail "shard 1 of B is not running"
out=$(m expire) || fail "expire with B held"
[[ $out == "expired kept $fC by keep ("* ]] && [ "$(echo "$out" | wc -l)" -eq 1 ] ||
  fail "expire with B held by a live process: '$out'"
[ "$(kept)" = "$fB" ] || fail "after keep with B held: $(kept)"
rm -f "$kdir/slow"
wait "$holder" || fail "the holder of B failed"
holder=
pass "expire respects keep, and keeps what a live process serves"
# --- keep: 1 and a corpus that grew: the older fingerprint stays while
# the newer one may still be stored from it, and goes once that is whole ---
gdir=$tmp/grow
mkdir -p "$gdir/in"
for i in a b c; do seq 1 200 | sed "s/^/$i /" >"$gdir/in/$i.txt"; done
cat >"$gdir/g.yaml" <<'YAML'
name: grown
inputs: in/*.txt
keep: 1
stages:
  - exec: [/bin/sh, -c, 'echo x >>calls; cat']
YAML
g1=$(m fingerprint "$gdir/g.yaml") || fail "fingerprint of grown"
m warm "$gdir/g.yaml" >/dev/null 2>&1 || fail "warm grown"
sleep 1.1
seq 1 20 | sed 's/^/d /' >"$gdir/in/d.txt"
g2=$(m fingerprint "$gdir/g.yaml") || fail "fingerprint of grown, grown"
[ "$g1" != "$g2" ] || fail "an appended input left the fingerprint"
m cat "$gdir/g.yaml" 3 | cmp -s - "$gdir/in/d.txt" || fail "cat of the new shard"
out=$(m expire) || fail "expire, grown"
[ "$out" = "nothing to expire" ] || fail "expire took what the newer fingerprint is stored from: '$out'"
m warm "$gdir/g.yaml" >/dev/null 2>&1 || fail "warm grown, grown"
[ "$(wc -l <"$gdir/calls")" -eq 4 ] || fail "one input appended: $(wc -l <"$gdir/calls") stage runs, not 3 + 1"
out=$(m expire) || fail "expire, grown whole"
[[ $out == "expired grown $g1 by keep ("* ]] || fail "expire once whole: '$out'"
for k in 0 1 2 3; do
  m cat "$g2" $k >"$tmp/got" || fail "cat $k after expire"
  cmp -s "$tmp/got" "$gdir/in/$(echo a b c d | cut -d' ' -f$((k + 1))).txt" || fail "shard $k after expire"
done
pass "keep: 1 and a grown corpus: the older fingerprint stays until the newer one is whole"
# --- rm of a snapshot whose shard is running under a dead run ---
ddir=$tmp/dead
mkdir -p "$ddir/in"
printf 'a\n' >"$ddir/in/0.txt"
cat >"$ddir/d.yaml" <<'YAML'
name: dead
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'sleep 60; cat', dead-run-stage]
YAML
fD=$(m fingerprint "$ddir/d.yaml") || fail "fingerprint of dead"
setsid "$matctl" --store "$store" cat "$ddir/d.yaml" 0 >/dev/null 2>&1 & holder=$!
for i in $(seq 100); do
  out=$(m stat "$fD" --json 2>/dev/null) && grep -q '"index":0,"state":"running"' <<<"$out" && break
  sleep 0.1
done
out=$(m stat "$fD" --json) || fail "shard 0 of dead is not running"
grep -q '"index":0,"state":"running"' <<<"$out" || fail "shard 0 of dead is not running"
kill -KILL -- -"$holder"               # matctl and its stage, all at once
wait "$holder" 2>/dev/null
holder=
out=$(m rm "$fD" 2>&1) || fail "rm of a snapshot with a dead run's claim: $out"
out=$(m ls --json) && grep -q "$fD" <<<"$out" && fail "rm left $fD listed: $(m ls)"
[ -d "$store/snapshots/$fD" ] && fail "rm left the store folder of $fD"
pass "rm gives up a dead run's claim and removes the snapshot"
echo "all matctl tests passed"
