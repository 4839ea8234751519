#!/usr/bin/env bash
# bench/gpu/cpu.sh - libmatgpu's CPU backend against read() and memcpy, in
# one run: builds build/bench (release) and runs bench_cpu, which prints
# "gbps NAME VALUE" and "ratio NAME VALUE" lines (bench_cpu.c says what
# each is). Usage: bench/gpu/cpu.sh [--size MIB] [--rounds N] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

bench/build.sh bench/gpu/bench_cpu
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
exec build/bench/bench/gpu/bench_cpu "$@"
