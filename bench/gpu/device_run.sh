#!/usr/bin/env bash
# bench/gpu/device_run.sh - everything libmatgpu needs a real GPU for, in
# one run on a machine with one: builds build/device with -Dcuda=enabled,
# runs test_mg_cuda and the Python tests with the device, then the bench
# (bench_gpu: gbps of pinned H2D, host read, naive, matgpu, and the
# ratios) and, only where torch with CUDA imports, the PyTorch baseline
# (torch_baseline.py: DataLoader(pin_memory=True) + .to("cuda",
# non_blocking=True)) over the same file. Prints "== step" headers and the
# bench's "gbps"/"ratio"/"target" lines; exits non-zero when a test fails.
# Exits 77, saying so, where there is no GPU.
# Usage: bench/gpu/device_run.sh [--size MIB] (default 1024)
set -uo pipefail
cd "$(dirname "$0")/../.."
size=1024
[ "${1:-}" = --size ] && size=$2

status=0
step() { echo "== $*"; }

step "build (build/device, -Dcuda=enabled)"
if [ ! -f build/device/build.ninja ]; then
  meson setup build/device -Dbuildtype=release -Dcuda=enabled \
    >build/device.setup.log 2>&1 || { tail -20 build/device.setup.log; exit 1; }
fi
ninja -C build/device >build/device.build.log 2>&1 ||
  { tail -40 build/device.build.log; exit 1; }

if [ "$(build/device/tests/gpu/test_mg_cuda >/dev/null 2>&1; echo $?)" = 77 ]
then
  build/device/tests/gpu/test_mg_cuda | tail -1
  echo "device_run: no CUDA device here: nothing measured"
  exit 77
fi
nvidia-smi -L 2>/dev/null || true

step "test_mg_cuda and the Python tests on the device"
meson test -C build/device --no-rebuild --print-errorlogs --num-processes 1 \
  test_mg_cuda test_matgpu_py || status=1

file=${TMPDIR:-/tmp}/matgpu-device-run.bin
step "bench_gpu over ${size} MiB ($file)"
if [ "$(stat -c %s "$file" 2>/dev/null)" != $((size << 20)) ]; then
  head -c $((size << 20)) /dev/urandom >"$file" || exit 1
fi
build/device/bench/gpu/bench_gpu --file "$file" || status=1

step "PyTorch baseline (DataLoader pin_memory + .to(cuda, non_blocking))"
PYTHONPATH=python MATGPU_LIB=build/device/gpu/libmatgpu.so.0 \
  /usr/bin/env python3 bench/gpu/torch_baseline.py --file "$file"
rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || status=1
rm -f "$file"
exit $status
