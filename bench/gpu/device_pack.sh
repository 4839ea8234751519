#!/usr/bin/env bash
# bench/gpu/device_pack.sh - packs, from a build here, everything the GPU
# checks need into one folder to copy to a machine with a GPU that lacks
# this project's build dependencies (FUSE, SQLite, libpq, ... are not
# needed there): test_mg_cuda, bench_gpu, libmatgpu, cmocka and the CUDA
# runtime, the Python binding, its tests and the PyTorch baseline, and
# run.sh, which runs them all there (bench/gpu/device_run.sh does the same
# where the project builds).
# Usage: bench/gpu/device_pack.sh OUTDIR [BUILDDIR]  (default build/device,
#        set up with -Dbuildtype=release -Dcuda=enabled if missing)
# Then, on the GPU machine: OUTDIR/run.sh [--size MIB]
set -euo pipefail
out=${1:?usage: device_pack.sh OUTDIR [BUILDDIR]}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$src/build/device}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$src" -Dbuildtype=release -Dcuda=enabled >/dev/null
fi
ninja -C "$build" gpu/libmatgpu.so.0.1.0 tests/gpu/test_mg_cuda \
  bench/gpu/bench_gpu >/dev/null
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/tests" "$out/bench"
cp "$build/tests/gpu/test_mg_cuda" "$build/bench/gpu/bench_gpu" "$out/bin/"
cp -L "$build/gpu/libmatgpu.so.0" "$out/lib/"
# the shared libraries they need that a GPU machine may lack
for lib in libcmocka.so.0 libcudart.so.13; do
  path=$(ldd "$build/tests/gpu/test_mg_cuda" | awk -v l=$lib '$1 == l {print $3}')
  [ -n "$path" ] || { echo "device_pack: $lib not found" >&2; exit 1; }
  cp -L "$path" "$out/lib/"
done
cp -r "$src/python" "$out/python"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$src/tests/gpu/test_matgpu.py" "$out/tests/"
cp "$src/bench/gpu/torch_baseline.py" "$out/bench/"
cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the GPU checks packed by bench/gpu/device_pack.sh: test_mg_cuda, the
# Python tests (python3 with torch), bench_gpu with its defaults and over
# reader counts, and the PyTorch baseline. Usage: run.sh [--size MIB]
set -uo pipefail
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib PYTHONPATH=$PWD/python \
  MATGPU_LIB=$PWD/lib/libmatgpu.so.0 PYTHONUNBUFFERED=1
size=1024
[ "${1:-}" = --size ] && size=$2
status=0
nvidia-smi -L 2>/dev/null; echo "cpus $(nproc)"
echo "== test_mg_cuda"; bin/test_mg_cuda || status=1
echo "== test_matgpu.py"; python3 tests/test_matgpu.py -v || status=1
f=${TMPDIR:-/tmp}/matgpu-device-run.bin
head -c $((size << 20)) /dev/urandom >"$f"
echo "== bench_gpu, defaults"; bin/bench_gpu --file "$f" || status=1
for t in 1 2 4 8; do
  echo "== bench_gpu, $t readers"
  bin/bench_gpu --file "$f" --rounds 5 --threads $t --count $((t + 2)) |
    grep -E '^gbps (host_ceiling|matgpu)|min_ceiling [0-9]'
done
echo "== PyTorch baseline"; python3 bench/torch_baseline.py --file "$f"
rc=$?; [ $rc = 0 ] || [ $rc = 77 ] || status=1
rm -f "$f"
exit $status
RUN
chmod +x "$out/run.sh"
echo "device_pack: $out ($(du -sh "$out" | cut -f1)); run $out/run.sh there"
