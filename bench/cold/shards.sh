#!/usr/bin/env bash
# bench/cold/shards.sh - where a cold read's time goes, shard by shard:
# mounts a `cat` stage over MIB (default 256) MiB of gen's token ids in 4
# shards with CODEC (default none), then a reader times each shard's
# `open` (the stages, the store and the push: the computation) and its
# reads apart. Prints "shard K open MS read MS BYTES" and, for the same
# bytes, "hand K MS" (`cat IN > FILE` by hand, after the mount's run).
# Every shard read through the mount is compared with its input (a cat
# stage gives it back): a mismatch exits 1.
# PERF=FILE records the mount's reads under `perf record -a -g -o FILE`
# (then: perf report -i FILE --no-children --sort pid,comm).
# usage: bench/cold/shards.sh [BUILD_DIR]   (env: MIB, CODEC, PERF)
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd)
mib=${MIB:-256} codec=${CODEC:-none}
per=$((mib / 4))
matfs=$build/tools/matfs gen=$build/bench/engine/gen
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
tmp=$(mktemp -d /var/tmp/mf-shards.XXXXXX)
mnt=$tmp/mnt dpid=
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/p/in" "$mnt" "$tmp/hand"
for k in 0 1 2 3; do "$gen" "$per" 0 $((100 + k)) >"$tmp/p/in/$k.bin"; done
printf 'name: c\ninputs: in/*.bin\ncompression: %s\nstages:\n  - exec: [cat]\n' \
  "$codec" >"$tmp/p/c.yaml"
"$matfs" --store "$tmp/store" --pipelines "$tmp/p" -f "$mnt" 2>>"$tmp/matfs.log" &
dpid=$!
for _ in $(seq 1 200); do [ -L "$mnt/c" ] && break; sleep 0.05; done
[ -L "$mnt/c" ] || { echo "spec not registered" >&2; exit 1; }
sync
pre=()
[ -n "${PERF:-}" ] && pre=(perf record -a -g -q -o "$PERF" --)
"${pre[@]}" /usr/bin/python3 - "$mnt/c" <<'PY' || exit 1
import os, sys, time
for k in range(4):
    t0 = time.perf_counter()
    fd = os.open("%s/shard-%05d" % (sys.argv[1], k), os.O_RDONLY)
    t1 = time.perf_counter()
    n = 0
    while True:
        b = os.read(fd, 1 << 17)
        if not b:
            break
        n += len(b)
    os.close(fd)
    t2 = time.perf_counter()
    print("shard %d open %.1f read %.1f %d" % (k, (t1 - t0) * 1e3, (t2 - t1) * 1e3, n))
PY
for k in 0 1 2 3; do
  t0=$(date +%s%N)
  cat "$tmp/p/in/$k.bin" >"$tmp/hand/$k"
  t1=$(date +%s%N)
  echo "hand $k $(( (t1 - t0) / 1000000 ))"
  cmp -s "$mnt/c/shard-0000$k" "$tmp/p/in/$k.bin" || { echo "shard $k differs" >&2; exit 1; }
done
