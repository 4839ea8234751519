#!/usr/bin/env bash
# bench/mount/first_read.sh - the first read of a stored zstd:3 shard
# through a fresh mount against `zstd -dc` of the same bytes, round by
# round: each round remounts (no page of the data, no chunk in memory),
# puts the store's files in the page cache (as `zstd -dc` finds its .zst),
# then times `cat MOUNT/z/*` and `zstd -dc` one after the other. Prints
# "round N c SECONDS d SECONDS ratio R" (R: zstd -dc's time over the
# mount's, higher is better, goal >= 1.0), then the minimum and median
# ratio and "load" lines (/proc/loadavg before and after).
#
# CPUS=LIST pins the daemon, the readers and zstd to those CPUs
# (taskset -c), to see how the read scales with cores: CPUS=0 against
# CPUS=0,1. PERF=FILE records the whole machine with `perf record -a -g`
# during the mount's reads of the last round.
#
# usage: bench/mount/first_read.sh [BUILD_DIR]  (env: ROUNDS (5), MIB (256),
#        CPUS, PERF). Needs /dev/fuse, fusermount3, zstd, getfattr.
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd)
rounds=${ROUNDS:-5} mib=${MIB:-256} cpus=${CPUS:-} perf_out=${PERF:-}
shards=4 per=$((mib / shards))
matfs=$build/tools/matfs gen=$build/bench/engine/gen
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
command -v zstd >/dev/null || { echo "zstd missing" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")

tmp=$(mktemp -d /var/tmp/mf-first.XXXXXX)
mnt=$tmp/mnt store=$tmp/store pipes=$tmp/p
dpid=
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
now() { date +%s%N; }
timeit() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null || { echo "failed: $*" >&2; exit 1; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}
mount_up() {
  mkdir -p "$mnt"
  "${pin[@]}" "$matfs" --store "$store" --pipelines "$pipes" -f "$mnt" 2>>"$tmp/matfs.log" &
  dpid=$!
  local _
  for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
  ls "$mnt" >/dev/null
}
mount_down() { fusermount3 -u "$mnt"; wait "$dpid"; dpid=; }

mkdir -p "$pipes/in"
for k in $(seq 0 $((shards - 1))); do echo "$k" >"$pipes/in/$k.txt"; done
printf 'name: z\ninputs: in/*.txt\ncompression: zstd:3\ncompression_adapt: false\nstages:\n' >"$pipes/z.yaml"
printf "  - exec: [/bin/sh, -c, 'exec %s %s 0 \$((MATFS_SHARD + 100))']\n" "$gen" "$per" >>"$pipes/z.yaml"
mount_up
cat "$mnt"/z/* >"$tmp/raw"
zstd -3 -q -f "$tmp/raw" -o "$tmp/raw.zst"
zfp=$(readlink "$mnt/z")
mount_down
echo "# $(nproc) cpus${cpus:+, pinned to $cpus}, $mib MiB in $shards shards, $rounds rounds, matfs $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)"
echo "load before $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=()
for r in $(seq 1 "$rounds"); do
  mount_up
  cat "$store/snapshots/$zfp"/*/*.mfs "$tmp/raw.zst" >/dev/null
  if [ "$r" = "$rounds" ] && [ -n "$perf_out" ]; then
    perf record -a -g -o "$perf_out" -q -- "${pin[@]}" cat "$mnt"/z/* >/dev/null 2>&1
    c=NA
  else
    c=$(timeit "${pin[@]}" cat "$mnt"/z/*)
  fi
  mount_down
  d=$(timeit "${pin[@]}" zstd -dc "$tmp/raw.zst")
  [ "$c" = NA ] && { echo "round $r perf recorded into $perf_out"; continue; }
  ratio=$(awk -v c="$c" -v d="$d" 'BEGIN { printf "%.2f", d / c }')
  ratios+=("$ratio")
  echo "round $r c $c d $d ratio $ratio"
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${ratios[@]}" | sort -g | awk '
  { v[NR] = $1 } END { printf "ratio c_first_read_vs_zstd_dc min %.2f median %.2f\n", v[1], v[int((NR + 1) / 2)] }'
