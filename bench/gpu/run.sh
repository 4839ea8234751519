#!/usr/bin/env bash
# bench/gpu/run.sh - libmatgpu against its baselines on CUDA device 0, in
# one run: builds build/bench (release) and runs bench_gpu, which prints
# "gbps NAME VALUE" and "ratio NAME VALUE" lines and the targets.
# Exits 77, saying so, where there is no CUDA toolkit or no GPU.
# Usage: bench/gpu/run.sh [bench_gpu options: --size MIB --rounds N
#        --dir DIR | --file PATH, --staging MIB --count N --threads N]
set -euo pipefail
cd "$(dirname "$0")/../.."

[ -f build/bench/build.ninja ] || meson setup build/bench \
  -Dbuildtype=release -Dtests=disabled >/dev/null
targets=$(ninja -C build/bench -t targets all)
if ! grep -q '^bench/gpu/bench_gpu:' <<<"$targets"; then
  echo "bench/gpu: no CUDA toolkit found when build/bench was configured:" \
    "bench_gpu is not built; nothing measured"
  exit 77
fi
ninja -C build/bench bench/gpu/bench_gpu >/dev/null
exec build/bench/bench/gpu/bench_gpu "$@"
