#!/usr/bin/env bash
# bench/cold/pages.sh - what a new page costs on this machine: the time to
# write MIB (default 256) MiB into files, COUNT (default 8) new files one
# after another, first into memory the system has not used for a while,
# then again at once after deleting them (the same memory, just freed).
# Prints "time fresh SECONDS" and "time reused SECONDS" (medians),
# "ratio fresh_vs_reused VALUE", and the kernel's free page reporting
# settings when it has them: on a virtual machine whose balloon driver
# reports free pages, the host takes freed memory back, and the guest's
# next touch of each page faults in the host. That cost falls on any
# path that needs more new memory than its baseline (docs/performance.md,
# "bench/cold").
# It first waits SETTLE (default 30) seconds, so that memory freed by what
# ran before is no longer "just freed".
# usage: bench/cold/pages.sh   (env: MIB, COUNT, SETTLE, DIR (default /var/tmp))
set -euo pipefail
mib=${MIB:-256} count=${COUNT:-8}
tmp=$(mktemp -d "${DIR:-/var/tmp}/mf-pages.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# pass: writes COUNT new files, prints each one's seconds
pass() {
  local i t0 t1
  for i in $(seq 1 "$count"); do
    t0=$(date +%s%N)
    dd if=/dev/zero of="$tmp/f$i" bs=1M count="$mib" status=none
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
  done
}
r=/sys/module/page_reporting/parameters
if [ -d "$r" ]; then
  for p in "$r"/*; do echo "page_reporting ${p##*/} $(cat "$p")"; done
fi
sleep "${SETTLE:-30}"
fresh=$(pass | median)
rm -f "$tmp"/f*
reused=$(pass | median)
echo "time fresh $fresh"
echo "time reused $reused"
awk -v a="$fresh" -v b="$reused" 'BEGIN { printf "ratio fresh_vs_reused %.2f\n", a / b }'
