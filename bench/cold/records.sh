#!/usr/bin/env bash
# bench/cold/records.sh - what indexing records costs the cold first read:
# the same `cat` stage over the same input read cold through the mount
# with no `records`, with `records: 2048` and with `records: lines`, per
# codec (none and zstd:3), in ROUNDS interleaved rounds (a new fingerprint
# each round: KEY), in one run.
#
# Input: MIB (default 128) MiB of text in 4 shards, lines of 100 bytes
# (base64 of bench/engine/gen's tokens), each file cut to a multiple of
# 2048 bytes so that every framing holds.
#
# Each cold read (`cat` of every shard of a new fingerprint) runs with the
# daemon, its stages and the reader in one cpuacct cgroup (cgroup v1,
# /sys/fs/cgroup/cpuacct: root only), so its CPU-seconds are the whole
# job's. Prints "time NAME SECONDS" and "cpu NAME SECONDS" (medians),
# and "ratio NAME WALL CPU": NAME's over the same codec without records
# (lower is better; the goal is <= 1.05). "load" lines give /proc/loadavg.
#
# usage: bench/cold/records.sh [BUILD_DIR]   (env: ROUNDS, MIB)
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd)
rounds=${ROUNDS:-5} mib=${MIB:-128} shards=4
matfs=$build/tools/matfs gen=$build/bench/engine/gen
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
cg=/sys/fs/cgroup/cpuacct/mf-cold-records.$$
mkdir "$cg" 2>/dev/null || { echo "no cpuacct cgroup (run as root, cgroup v1)" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-cold-rec.XXXXXX)
mnt=$tmp/mnt store=$tmp/store pipes=$tmp/p
dpid=
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  for p in $(cat "$cg/tasks" 2>/dev/null); do echo "$p" >/sys/fs/cgroup/cpuacct/tasks; done
  rmdir "$cg" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

mkdir -p "$pipes/in" "$mnt"
per=$((mib * 1048576 / shards / 2048 * 2048))
for k in $(seq 0 $((shards - 1))); do
  "$gen" $((mib / shards)) 0 $((100 + k)) | base64 -w 99 | head -c "$per" >"$pipes/in/$k.txt"
done
# the daemon in the cgroup from its first instruction
sh -c 'echo $$ >"$1/tasks"; shift; exec "$@"' sh "$cg" \
  "$matfs" --store "$store" --pipelines "$pipes" -f "$mnt" 2>>"$tmp/matfs.log" &
dpid=$!
for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
spec() { # NAME CODEC RECORDS KEY
  printf 'name: %s\ninputs: in/*.txt\ncompression: %s\nfingerprint: %s\n' "$1" "$2" "$4"
  [ "$3" = plain ] || printf 'records: %s\n' "$3"
  printf 'stages:\n  - exec: [cat]\n'
}
# cold NAME: wall and CPU seconds of reading every shard of NAME once
cold() {
  local u0 u1 t0 t1
  sync
  u0=$(cat "$cg/cpuacct.usage") t0=$(date +%s%N)
  sh -c 'echo $$ >"$1/tasks"; shift; exec cat "$@"' sh "$cg" "$mnt/$1"/shard-* >/dev/null ||
    { echo "reading $1 failed" >&2; tail "$tmp/matfs.log" >&2; exit 1; }
  t1=$(date +%s%N) u1=$(cat "$cg/cpuacct.usage")
  echo "$(( (t1 - t0) / 1000 )) $(( (u1 - u0) / 1000 ))"
}
echo "load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(nproc) cpus, $mib MiB of 100-byte lines in $shards shards, $rounds rounds"
declare -A W C
runs=(none:plain none:2048 none:lines zstd:3:plain zstd:3:2048 zstd:3:lines)
for r in $(seq 1 "$rounds"); do
  for x in "${runs[@]}"; do
    codec=${x%:*} rec=${x##*:} name=$(echo "${codec}_$rec" | tr -d :)
    spec "$name$r" "$codec" "$rec" "$name-$r-$$" >"$pipes/$name$r.yaml"
    for _ in $(seq 1 200); do [ -L "$mnt/$name$r" ] && break; sleep 0.05; done
    read -r w c < <(cold "$name$r")
    W[$name]+="$w " C[$name]+="$c "
  done
done
for x in "${runs[@]}"; do
  codec=${x%:*} rec=${x##*:} name=$(echo "${codec}_$rec" | tr -d :)
  base=$(echo "${codec}_plain" | tr -d :)
  w=$(tr ' ' '\n' <<<"${W[$name]}" | grep . | median)
  c=$(tr ' ' '\n' <<<"${C[$name]}" | grep . | median)
  bw=$(tr ' ' '\n' <<<"${W[$base]}" | grep . | median)
  bc=$(tr ' ' '\n' <<<"${C[$base]}" | grep . | median)
  awk -v n="$name" -v w="$w" -v c="$c" -v bw="$bw" -v bc="$bc" 'BEGIN {
    printf "time %s %.3f\ncpu %s %.3f\nratio %s %.3f %.3f\n", n, w / 1e6, n, c / 1e6, n, w / bw, c / bc }'
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
