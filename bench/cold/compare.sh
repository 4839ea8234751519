#!/usr/bin/env bash
# bench/cold/compare.sh - the CPU cost of a cold read at codec none, two
# builds side by side: a mount of each (its own store) and the stages by
# hand, in the same rounds, one after the other, so that both builds meet
# the same load. Each round: a new fingerprint of a `cat` stage over MIB
# (default 256) MiB in 4 shards, read cold through mount A, then through
# mount B, then the stages by hand piped into new files (`cat IN | cat |
# cat > FILE`), each side in a cpuacct cgroup of its own (the daemon with
# its stages and the reader; the hand run's processes), counted from the
# open until every shard is committed.
#
# Prints per round "round R A B HAND" (CPU-seconds per GiB), then
# "cpu_over A S" and "cpu_over B S" (medians over the rounds of each
# round's mount minus hand), "cpu_over_min A S", "cpu_over_max A S" (the
# spread, likewise for B) and "cpu_b_minus_a S" (the median of the
# rounds' B minus A: what B saves when negative).
#
# PRIME=1 (the default) writes and deletes 3 x MIB in /dev/shm before each
# side, so that every side takes memory just freed (bench/cold/pages.sh);
# PRIME=0 leaves each side what the host left. CODEC (default none) is the
# spec's compression.
#
# usage: bench/cold/compare.sh BUILD_A BUILD_B   (env: ROUNDS=9, MIB, PRIME,
# CODEC). Needs root, cgroup v1's cpuacct, /dev/fuse and fusermount3.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_A BUILD_B" >&2; exit 2; }
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd)
rounds=${ROUNDS:-9} mib=${MIB:-256} prime=${PRIME:-1} codec=${CODEC:-none}
shards=4 per=$((mib / shards))
cgroot=/sys/fs/cgroup/cpuacct
[ -w "$cgroot" ] || { echo "needs root and $cgroot" >&2; exit 77; }
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
for x in "$a/tools/matfs" "$b/tools/matfs" "$a/bench/engine/gen"; do
  [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }
done

tmp=$(mktemp -d /var/tmp/mf-compare.XXXXXX)
declare -A pid
cleanup() {
  local s g _
  for s in A B; do
    grep -q " $tmp/mnt$s fuse" /proc/self/mounts &&
      { fusermount3 -u "$tmp/mnt$s" || umount -l "$tmp/mnt$s"; }
    [ -n "${pid[$s]:-}" ] && wait "${pid[$s]}" 2>/dev/null
  done
  rm -rf "$tmp"
  for g in A B H; do
    for _ in $(seq 1 50); do rmdir "$cgroot/mf-compare-$$-$g" 2>/dev/null && break; sleep 0.1; done
  done
}
trap cleanup EXIT
for g in A B H; do mkdir "$cgroot/mf-compare-$$-$g" || exit 1; done

# in_cg G CMD...: CMD (a command or a function) in cgroup G from its start
in_cg() {
  local g=$cgroot/mf-compare-$$-$1
  shift
  (
    echo "$BASHPID" >"$g/tasks"
    if declare -F "$1" >/dev/null; then "$@"; else exec "$@"; fi
  )
}
usage() { cat "$cgroot/mf-compare-$$-$1/cpuacct.usage"; }
per_gib() { awk -v n="$1" -v m="$mib" 'BEGIN { printf "%.4f\n", n / 1e9 / (m / 1024) }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
do_prime() {
  [ "$prime" = 1 ] || return 0
  head -c $((mib * 3))M /dev/zero >/dev/shm/mf-compare-prime.$$
  rm -f /dev/shm/mf-compare-prime.$$
}

mkdir -p "$tmp/in" "$tmp/hand"
for k in $(seq 0 $((shards - 1))); do "$a/bench/engine/gen" "$per" 0 $((100 + k)) >"$tmp/in/$k.bin"; done
for s in A B; do
  build=$a
  [ "$s" = B ] && build=$b
  mkdir -p "$tmp/p$s" "$tmp/mnt$s"
  ln -s ../in "$tmp/p$s/in"
  in_cg "$s" "$build/tools/matfs" --store "$tmp/store$s" --pipelines "$tmp/p$s" \
    -f "$tmp/mnt$s" 2>>"$tmp/matfs$s.log" &
  pid[$s]=$!
  for _ in $(seq 1 200); do grep -q " $tmp/mnt$s fuse" /proc/self/mounts && break; sleep 0.05; done
done

# cold S R: CPU-seconds per GiB of mount S's cold read of round R
cold() {
  local s=$1 r=$2 mnt=$tmp/mnt$1 n _ u0
  printf 'name: c%s\ninputs: in/*.bin\ncompression: %s\nfingerprint: compare-%s-%s\nstages:\n  - exec: [cat]\n' \
    "$r" "$codec" "$r" "$$" >"$tmp/p$s/c$r.yaml"
  for _ in $(seq 1 200); do [ -L "$mnt/c$r" ] && break; sleep 0.05; done
  sync
  do_prime
  u0=$(usage "$s")
  in_cg "$s" cat "$mnt/c$r"/* >/dev/null || { echo "cold read $s failed" >&2; exit 1; }
  for _ in $(seq 1 600); do
    n=$(getfattr --absolute-names -n user.matfs.materialized --only-values "$mnt/c$r" 2>/dev/null)
    [ "$n" = "$shards" ] && break
    sleep 0.1
  done
  [ "$n" = "$shards" ] || { echo "mount $s: not committed within 60 s" >&2; exit 1; }
  per_gib $(($(usage "$s") - u0))
}
hand_piped() {
  local k
  for k in $(seq 0 $((shards - 1))); do cat "$tmp/in/$k.bin" | cat | cat >"$tmp/hand/$r.$k"; done
}
echo "load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(nproc) cpus, $mib MiB in $shards shards, codec $codec, $rounds rounds, prime $prime"
echo "# A $a"
echo "# B $b"
: >"$tmp/rounds"
for r in $(seq 1 "$rounds"); do
  ca=$(cold A "$r") || exit 1
  cb=$(cold B "$r") || exit 1
  do_prime
  u0=$(usage H)
  in_cg H hand_piped
  ch=$(per_gib $(($(usage H) - u0)))
  rm -f "$tmp/hand/$r".*
  echo "round $r $ca $cb $ch" | tee -a "$tmp/rounds"
done
col() { awk -v c="$1" '{ printf "%.4f\n", $c }' "$tmp/rounds"; }
overs() { awk -v c="$1" '{ printf "%.4f\n", $c - $5 }' "$tmp/rounds"; }
for s in A:3 B:4; do
  echo "cpu_over ${s%%:*} $(overs "${s#*:}" | median)"
  echo "cpu_over_min ${s%%:*} $(overs "${s#*:}" | sort -g | head -1)"
  echo "cpu_over_max ${s%%:*} $(overs "${s#*:}" | sort -g | tail -1)"
done
echo "cpu_hand $(col 5 | median)"
echo "cpu_b_minus_a $(awk '{ printf "%.4f\n", $4 - $3 }' "$tmp/rounds" | median)"
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
