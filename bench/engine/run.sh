#!/usr/bin/env bash
# bench/engine/run.sh - the engine against its baselines, in one run:
#   (a) the stages run by hand into /dev/null
#   (b) `matctl warm` of the same pipeline, cold (zstd:3)
#   (c) `matctl cat` of the materialized shard into /dev/null, warm
#   (d) `zstd -dc` at the same level on the same bytes stored as one .zst
#   (e) `cat` of the raw bytes (page cache)
#   (c') (c) with codec none
# Prints "ratio NAME VALUE  description" lines, medians of ROUNDS
# interleaved rounds. Usage: bench/engine/run.sh [SIZE_MIB] [ROUNDS] [WORK]
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${1:-256} rounds=${2:-3} work=${3:-64}

bench/build.sh
matctl=$(pwd)/build/bench/tools/matctl
gen=$(pwd)/build/bench/bench/engine/gen

tmp=$(mktemp -d /tmp/mf-bench-engine.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/p/in"
echo x >"$tmp/p/in/seed"
for codec in zstd:3 none; do
  cat >"$tmp/p/${codec%%:*}.yaml" <<YAML
name: bench-${codec%%:*}
inputs: in/seed
stages:
  - exec: [$gen, "$size", "$work"]
compression: $codec
fingerprint: bench-${codec%%:*}-$size-$work  # compression is not covered
YAML
done
"$gen" "$size" 0 >"$tmp/raw" # same distribution, for (d) and (e)
zstd -3 -q -f "$tmp/raw" -o "$tmp/raw.zst"

now() { date +%s%N; }
t() { local s; s=$(now); "$@" >/dev/null; echo $(( $(now) - s )); }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

declare -A T
for r in $(seq 1 "$rounds"); do
  T[a]+="$(t "$gen" "$size" "$work") "
  store=$tmp/store$r
  T[b]+="$(t "$matctl" --store "$store" warm "$tmp/p/zstd.yaml") "
  T[c]+="$(t "$matctl" --store "$store" cat bench-zstd 0) "
  T[d]+="$(t zstd -dc "$tmp/raw.zst") "
  T[e]+="$(t cat "$tmp/raw") "
  "$matctl" --store "$store" warm "$tmp/p/none.yaml" >/dev/null
  T[cn]+="$(t "$matctl" --store "$store" cat bench-none 0) "
  rm -rf "$store"
done
declare -A M
for k in a b c d e cn; do M[$k]=$(echo ${T[$k]} | tr ' ' '\n' | median); done
mbs() { awk -v ns="$1" -v mib="$size" 'BEGIN {printf "%.0f", mib * 1048576 / (ns / 1e9) / 1e6}'; }
ratio() { awk -v x="$1" -v y="$2" 'BEGIN {printf "%.2f", x / y}'; }

echo "# $size MiB of stage output, $rounds rounds, medians; $(nproc) cores"
for k in a b c d e cn; do printf '# %-3s %6d ms  %6s MB/s\n' "$k" $(( M[$k] / 1000000 )) "$(mbs "${M[$k]}")"; done
echo "ratio cold_overhead $(ratio "${M[b]}" "${M[a]}")  (b)/(a): matctl warm zstd:3 time / stages by hand (target <= 1.10)"
echo "ratio warm_zstd_vs_zstd_dc $(ratio "${M[d]}" "${M[c]}")  (c) vs (d): matctl cat zstd:3 speed / zstd -dc speed (target >= 1.0)"
echo "ratio warm_none_vs_cat $(ratio "${M[e]}" "${M[cn]}")  (c') vs (e): matctl cat codec none speed / cat speed (target >= 0.9)"
echo "ratio warm_zstd_vs_cat $(ratio "${M[e]}" "${M[c]}")  (c) vs (e): matctl cat zstd:3 speed / cat speed"
