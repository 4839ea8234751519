#!/usr/bin/env bash
# bench/engine/threads.sh - the engine with 1 and 2 compression threads and
# 1 and 2 reader threads, in one run (bench/engine/threads.c says what each
# figure is): one shard of SIZE_MIB MiB of bench/engine/gen output with
# WORK rounds of arithmetic per token, zstd:3, ROUNDS interleaved rounds.
# The readers' baseline is `zstd -dc` of the same bytes (zstd -3, one
# file). Prints "time", "cpu", "size" and "ratio" lines; also the
# compression ratio of gen's output (raw / stored bytes of the shard).
# Usage: bench/engine/threads.sh [SIZE_MIB] [ROUNDS] [WORK]
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${1:-128} rounds=${2:-3} work=${3:-64}

bench/build.sh
gen=$(pwd)/build/bench/bench/engine/gen

tmp=$(mktemp -d /var/tmp/mf-bench-threads.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/p/in" "$tmp/store"
echo x >"$tmp/p/in/seed"
cat >"$tmp/p/zstd.yaml" <<YAML
name: bench-threads
inputs: in/seed
stages:
  - exec: [$gen, "$size", "$work"]
compression: zstd:3
YAML
# same distribution as the stage's output, for zstd -dc
"$gen" "$size" 0 | zstd -3 -q -o "$tmp/raw.zst"
echo "# $size MiB of stage output, WORK=$work, load $(cut -d' ' -f1-3 /proc/loadavg)"
build/bench/bench/engine/threads --spec "$tmp/p/zstd.yaml" --store "$tmp/store" \
  --rounds "$rounds" --zst "$tmp/raw.zst" -- "$gen" "$size" "$work"
