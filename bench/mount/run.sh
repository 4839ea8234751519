#!/usr/bin/env bash
# bench/mount/run.sh - reads through the matfs mount against their
# baselines, side by side in one run, on MIB (default 512) MiB of shard
# data. Prints "time NAME SECONDS" (medians of ROUNDS rounds, interleaved)
# and "ratio NAME VALUE" lines; ratios are speed over baseline speed
# (higher is better) except f and g, which are time over baseline time
# (lower is better):
#
#   a  cat of a plain file in the page cache                 (baseline)
#   b  cached re-read through the mount              vs a, target >= 0.95
#   a_dd, b_dd  a and b with `dd bs=1M` instead of cat (the reads of 1 MiB
#      requests); b_dd vs a_dd
#   c  first read of a materialized zstd:3 shard, its store file in the
#      page cache, its data not                      vs d, target >= 1.0
#   d  zstd -dc of the same bytes to /dev/null                (baseline)
#   e  c with compression: none                      vs a, target >= 0.5
#   f  cold first read (stages run) vs the stages by hand into a file,
#                                                         target <= 1.10
#      and the chunks the f reads decompressed and took from the tap
#      (the root xattrs user.matfs.chunks_decompressed, .chunks_tapped)
#   g  ls -l of a snapshot of 10,000 shards vs ls -l of 10,000 files on
#      tmpfs                                              target <= 3
#
# Also "gbps NAME VALUE" for a, b, a_dd, b_dd and "count NAME N" lines.
# usage: bench/mount/run.sh [BUILD_DIR]   (env: ROUNDS, MIB, WORK)
# Needs /dev/fuse, fusermount3, zstd; as root it also raises the mount's
# read-ahead (as matfs does). The stage is bench/engine/gen.
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd) # stages run in the spec folder
rounds=${ROUNDS:-5} mib=${MIB:-512} work=${WORK:-32} shards=4
per=$((mib / shards))
matfs=$build/tools/matfs gen=$build/bench/engine/gen
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
command -v zstd >/dev/null || { echo "zstd missing" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-bench.XXXXXX)
shm=$(mktemp -d /dev/shm/mf-bench.XXXXXX)
mnt=$tmp/mnt store=$tmp/store pipes=$tmp/p
dpid=
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp" "$shm"
}
trap cleanup EXIT

now() { date +%s%N; }
# timeit CMD...: seconds CMD took (stdout to /dev/null)
timeit() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null || { echo "failed: $*" >&2; exit 1; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}
# dd_all FILE...: each file through dd with 1 MiB reads
dd_all() {
  local f
  for f in "$@"; do dd if="$f" of=/dev/null bs=1M status=none || return 1; done
}
# counter NAME: a chunk counter of the mount's root
counter() { getfattr --absolute-names -n "user.matfs.$1" --only-values "$mnt"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
declare -A T

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

# --- the data: 4 shards of gen output, zstd:3 and none ---
mkdir -p "$pipes/in" "$pipes/many"
for k in $(seq 0 $((shards - 1))); do echo "$k" >"$pipes/in/$k.txt"; done
spec() { # spec NAME COMPRESSION SEED-BASE WORK
  printf 'name: %s\ninputs: in/*.txt\ncompression: %s\nstages:\n' "$1" "$2"
  printf "  - exec: [/bin/sh, -c, 'exec %s %s %s \$((MATFS_SHARD + %s))']\n" \
    "$gen" "$per" "$4" "$3"
}
spec z zstd:3 100 0 >"$pipes/z.yaml"
spec n none 200 0 >"$pipes/n.yaml"
(cd "$pipes/many" && seq -f 'f%05g.txt' 0 9999 | xargs touch)
printf 'name: many\ninputs: many/*.txt\nstages:\n  - exec: [cat]\n' >"$pipes/many.yaml"
(cd "$shm" && seq -f 'shard-%05g' 0 9999 | xargs touch)

mount_up
cat "$mnt"/z/* >"$tmp/raw" # computes z
cat "$mnt"/n/* >/dev/null  # computes n
zstd -3 -q -f "$tmp/raw" -o "$tmp/raw.zst"
zfp=$(readlink "$mnt/z") nfp=$(readlink "$mnt/n")
echo "# $(nproc) cpus, $mib MiB in $shards shards, $rounds rounds, store $(du -sh "$store" | cut -f1)"

for r in $(seq 1 "$rounds"); do
  cat "$tmp/raw" "$tmp/raw.zst" "$mnt"/z/* >/dev/null # warm
  T[a]+="$(timeit cat "$tmp/raw") "
  T[b]+="$(timeit cat "$mnt"/z/*) "
  T[a_dd]+="$(timeit dd_all "$tmp/raw") "
  T[b_dd]+="$(timeit dd_all "$mnt"/z/*) "
  T[d]+="$(timeit zstd -dc "$tmp/raw.zst") "
  # c and e: a fresh mount holds no page of the data and no chunk
  mount_down
  mount_up
  cat "$store/snapshots/$zfp"/*/*.mfs "$store/snapshots/$nfp"/*/*.mfs >/dev/null
  T[c]+="$(timeit cat "$mnt"/z/*) "
  T[e]+="$(timeit cat "$mnt"/n/*) "
  ls -l "$mnt/many/" "$shm" >/dev/null
  T[g]+="$(timeit ls -l "$mnt/many/") "
  T[gb]+="$(timeit ls -l "$shm") "
done

# --- f: cold, with stages that work like a tokenizer ---
frounds=$(( rounds < 3 ? rounds : 3 ))
dec0=$(counter chunks_decompressed) tap0=$(counter chunks_tapped)
for r in $(seq 1 "$frounds"); do
  seed=$((1000 + 10 * r))
  spec "cold$r" zstd:3 "$seed" "$work" >"$pipes/cold$r.yaml"
  for _ in $(seq 1 100); do [ -L "$mnt/cold$r" ] && break; sleep 0.05; done
  T[f]+="$(timeit cat "$mnt/cold$r"/*) "
  hand() {
    local k
    for k in $(seq 0 $((shards - 1))); do
      "$gen" "$per" "$work" $((seed + k)) >"$tmp/hand$k"
    done
  }
  T[fb]+="$(timeit hand) "
  rm -f "$tmp"/hand*
done
echo "count f_chunks_decompressed $(( $(counter chunks_decompressed) - dec0 ))"
echo "count f_chunks_tapped $(( $(counter chunks_tapped) - tap0 ))"
mount_down

for k in a b a_dd b_dd c d e f fb g gb; do
  T[$k]=$(echo "${T[$k]}" | tr ' ' '\n' | grep . | median)
  echo "time $k ${T[$k]}"
done
ratio() { awk -v x="$2" -v y="$3" -v n="$1" 'BEGIN { printf "ratio %s %.2f\n", n, x / y }'; }
for k in a b a_dd b_dd; do
  awk -v n="$k" -v s="${T[$k]}" -v mib="$mib" \
    'BEGIN { printf "gbps %s %.2f\n", n, mib * 1048576 / s / 1e9 }'
done
ratio b_cached_reread_vs_page_cache "${T[a]}" "${T[b]}"
ratio b_dd_cached_reread_vs_page_cache "${T[a_dd]}" "${T[b_dd]}"
ratio c_first_read_zstd_vs_zstd_dc "${T[d]}" "${T[c]}"
ratio e_first_read_none_vs_page_cache "${T[a]}" "${T[e]}"
ratio f_cold_read_vs_stages_by_hand "${T[f]}" "${T[fb]}"
ratio g_ls_10000_vs_tmpfs "${T[g]}" "${T[gb]}"
