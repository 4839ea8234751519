#!/usr/bin/env bash
# bench/mount/reread.sh - the cached re-read: a shard already in the
# mount's page cache read again (no request reaches the daemon:
# FOPEN_KEEP_CACHE) against the same bytes read again from ext4's page
# cache (the store's file system), in one run, on MIB (default 256) MiB of
# Zipf-like token ids (bench/engine/gen) in 4 shards of a `cat` stage.
#
# Two ways the mount's pages come in: "pushed" (the cold read that
# computes the shards puts them in as the stage writes, fuse_push.c) and
# "read" (a fresh mount reads the committed shards: the kernel's
# read-ahead fills them). The ext4 copy is dropped from the cache and read
# once, so its pages come from read-ahead as a file read from disk does.
#
# Prints "gbps NAME V" (medians of ROUNDS interleaved re-reads with cat:
# ext4, pushed, read), "ratio reread_pushed_vs_ext4 V" and "ratio
# reread_read_vs_ext4 V" (speed over ext4's speed), "cpu NAME S" (the
# reader's CPU-seconds per GiB, in a cpuacct cgroup, where cgroup v1 is
# there and this is root), and, as root, "folios FILE orderN=COUNT ..." for
# one shard of each and the ext4 copy (bench/mount/folios: order 0 is a
# 4 KiB folio). PERF=FILE records ROUNDS more re-reads of each under `perf
# record -g` into FILE.ext4, FILE.pushed and FILE.read.
#
# usage: bench/mount/reread.sh [BUILD_DIR]   (env: ROUNDS=9, MIB, PERF)
# Needs /dev/fuse and fusermount3.
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd)
rounds=${ROUNDS:-9} mib=${MIB:-256} shards=4
per=$((mib / shards))
matfs=$build/tools/matfs gen=$build/bench/engine/gen folios=$build/bench/mount/folios
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-reread.XXXXXX)
mnt=$tmp/mnt store=$tmp/store pipes=$tmp/p
dpid=
cgroot=/sys/fs/cgroup/cpuacct cg=
if [ -w "$cgroot" ] && [ -r "$cgroot/cpuacct.usage" ]; then
  cg=$cgroot/mf-reread-$$
  mkdir "$cg" 2>/dev/null || cg=
fi
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp"
  local _
  for _ in $(seq 1 50); do [ -z "$cg" ] || rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
}
trap cleanup EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mount_up() {
  mkdir -p "$mnt"
  "$matfs" --store "$store" --pipelines "$pipes" -f "$mnt" 2>>"$tmp/matfs.log" &
  dpid=$!
  local _
  for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
  ls "$mnt" >/dev/null
}
mount_down() {
  fusermount3 -u "$mnt"
  wait "$dpid"
  dpid=
}
# reread NAME FILE...: one cat of the files: "SECONDS CPU_NS" (CPU_NS 0
# without a cgroup)
reread() {
  shift
  local t0 t1 u0=0 u1=0
  [ -n "$cg" ] && u0=$(cat "$cg/cpuacct.usage")
  t0=$(date +%s%N)
  ( [ -z "$cg" ] || echo "$BASHPID" >"$cg/tasks"; exec cat "$@" ) >/dev/null ||
    { echo "failed: cat $*" >&2; exit 1; }
  t1=$(date +%s%N)
  [ -n "$cg" ] && u1=$(cat "$cg/cpuacct.usage")
  echo "$(( t1 - t0 )) $(( u1 - u0 ))"
}

mkdir -p "$pipes/in"
for k in $(seq 0 $((shards - 1))); do "$gen" "$per" 0 $((300 + k)) >"$pipes/in/$k.bin"; done
spec() { # NAME
  printf 'name: %s\ninputs: in/*.bin\ncompression: none\nstages:\n  - exec: [cat]\n' "$1"
}
spec pushed >"$pipes/pushed.yaml"
spec read >"$pipes/read.yaml"
mount_up
cat "$mnt"/read/* >/dev/null # computed; its pages go at the remount
mount_down
mount_up
cat "$mnt"/pushed/* >"$tmp/ext4" # computed now: pushed as it runs
cat "$mnt"/read/* >/dev/null     # read from the store: read-ahead
# the ext4 copy as a file read from disk: out of the cache, read once
sync "$tmp/ext4"
dd if="$tmp/ext4" iflag=nocache count=0 status=none
cat "$tmp/ext4" >/dev/null
echo "load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(nproc) cpus, $mib MiB in $shards shards, $rounds rounds"
declare -A T C
for _ in $(seq 1 "$rounds"); do
  for w in ext4 pushed read; do
    if [ "$w" = ext4 ]; then set -- "$tmp/ext4"; else set -- "$mnt/$w"/*; fi
    read -r ns cpu < <(reread "$w" "$@")
    T[$w]+="$ns " C[$w]+="$cpu "
  done
done
for w in ext4 pushed read; do
  T[$w]=$(echo "${T[$w]}" | tr ' ' '\n' | grep . | median)
  awk -v n="$w" -v ns="${T[$w]}" -v m="$mib" \
    'BEGIN { printf "gbps %s %.2f\n", n, m * 1048576 / ns }'
  [ -n "$cg" ] && awk -v n="$w" -v c="$(echo "${C[$w]}" | tr ' ' '\n' | grep . | median)" \
    -v m="$mib" 'BEGIN { printf "cpu %s %.4f\n", n, c / 1e9 / (m / 1024) }'
done
for w in pushed read; do
  awk -v n="$w" -v x="${T[ext4]}" -v y="${T[$w]}" \
    'BEGIN { printf "ratio reread_%s_vs_ext4 %.2f\n", n, x / y }'
done
if [ -x "$folios" ] && [ -r /proc/kpageflags ]; then
  "$folios" "$tmp/ext4" "$mnt/pushed/shard-00000" "$mnt/read/shard-00000"
fi
if [ -n "${PERF:-}" ]; then
  for w in ext4 pushed read; do
    if [ "$w" = ext4 ]; then set -- "$tmp/ext4"; else set -- "$mnt/$w"/*; fi
    files=()
    for _ in $(seq 1 "$rounds"); do files+=("$@"); done
    perf record -g -q -o "$PERF.$w" -- cat "${files[@]}" >/dev/null ||
      { echo "perf record failed" >&2; exit 1; }
  done
fi
mount_down
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
