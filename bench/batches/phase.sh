#!/usr/bin/env bash
# bench/batches/phase.sh - where a warm epoch's time goes, for one build
# against another in the same run: every batch of one epoch (seed 1,
# W=1, BATCH_KIB KiB batches, default 512) read by number through a fresh
# mount of a materialized snapshot of MIB MiB in 16 shards (page caches
# dropped before each mount), builds alternating, ROUNDS each. Printed,
# medians over the rounds: the epoch, the reader's time in open(2),
# read(2) and close(2), and the daemon's CPU (utime + stime at the end
# of the epoch, from /proc); then the ratios of the base build over this
# one. Two snapshots, as bench/batches/run.sh warm: zstd:3 with 2 KiB
# records and codec none with 256-byte records (shuffle_window 64MiB,
# chunks of 4 MiB).
#
# usage: bench/batches/phase.sh BUILD_DIR [BASE_BUILD_DIR]  (env: MIB=256,
# ROUNDS=3, BATCH_KIB=512); root (drop_caches); /dev/fuse.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [BASE_BUILD_DIR]" >&2; exit 2; }
builds=()
for b in "$@"; do builds+=("$(cd "$b" && pwd)"); done
mib=${MIB:-256} rounds=${ROUNDS:-3} bkib=${BATCH_KIB:-512}
py=/usr/bin/python3 gen=${builds[0]}/bench/engine/gen
for b in "${builds[@]}"; do
  [ -x "$b/tools/matfs" ] || { echo "missing $b/tools/matfs: build first" >&2; exit 1; }
done
[ -x "$gen" ] || { echo "missing $gen: build first" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
[ "$(id -u)" = 0 ] || { echo "run as root (drop_caches)" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-phase.XXXXXX)
mnt=$tmp/mnt dpid=
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mount_up() { # BUILD STORE PIPES
  mkdir -p "$mnt"
  "$1/tools/matfs" --store "$2" --pipelines "$3" -f "$mnt" 2>>"$tmp/matfs.log" &
  dpid=$!
  local _
  for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
  ls "$mnt" >/dev/null
}
mount_down() { fusermount3 -u "$mnt"; wait "$dpid"; dpid=; }
# epoch VIEW: "EPOCH_MS OPEN_MS READ_MS CLOSE_MS"
epoch() {
  "$py" - "$1" <<'PY'
import os, sys, time
d, buf = sys.argv[1], bytearray(1 << 20)
to = tr = tc = 0.0
n, t0 = 0, time.perf_counter()
while True:
    a = time.perf_counter()
    try:
        fd = os.open(os.path.join(d, "batch-%06d" % n), os.O_RDONLY)
    except FileNotFoundError:
        break
    b = time.perf_counter()
    while os.readv(fd, [buf]):
        pass
    c = time.perf_counter()
    os.close(fd)
    e = time.perf_counter()
    to, tr, tc, n = to + b - a, tr + c - b, tc + e - c, n + 1
print("%.1f %.1f %.1f %.1f" % ((time.perf_counter() - t0) * 1e3, to * 1e3, tr * 1e3, tc * 1e3))
PY
}

echo "# $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $mib MiB, $rounds rounds, builds: ${builds[*]}"
mkdir -p "$tmp/in"
for k in $(seq 0 15); do "$gen" $((mib / 16)) 0 $((500 + k)) >"$tmp/in/$k.bin"; done
hz=$(getconf CLK_TCK)
for cfg in "zstd:3 2048" "none 256"; do
  read -r codec rsize <<<"$cfg"
  name=w${codec%%:*}
  pipes=$tmp/p-$name store=$tmp/s-$name
  mkdir -p "$pipes"
  printf 'name: %s\ninputs: ../in/*.bin\nshards: 16\ncompression: %s\nrecords: %s\nshuffle_window: 64MiB\nstages:\n  - exec: [cat]\n' \
    "$name" "$codec" "$rsize" >"$pipes/$name.yaml"
  mount_up "${builds[0]}" "$store" "$pipes"
  for _ in $(seq 1 200); do [ -L "$mnt/$name" ] && break; sleep 0.05; done
  cat "$mnt/$name"/* >/dev/null
  fp=$(readlink "$mnt/$name")
  mount_down
  view=$mnt/$fp/batches/$((bkib * 1024 / rsize))/seed-1/epoch-0/rank-0-of-1
  declare -A E O R C D
  E=() O=() R=() C=() D=()
  for _ in $(seq 1 "$rounds"); do
    for i in "${!builds[@]}"; do
      sync; echo 3 >/proc/sys/vm/drop_caches
      mount_up "${builds[$i]}" "$store" "$pipes"
      read -r e o r c < <(epoch "$view")
      d=$(awk -v hz="$hz" '{ printf "%.0f", ($14 + $15) * 1000 / hz }' "/proc/$dpid/stat")
      mount_down
      E[$i]+="$e " O[$i]+="$o " R[$i]+="$r " C[$i]+="$c " D[$i]+="$d "
    done
  done
  for i in "${!builds[@]}"; do
    m() { echo "$1" | tr ' ' '\n' | grep . | median; }
    E[$i]=$(m "${E[$i]}") D[$i]=$(m "${D[$i]}")
    echo "phase ${name}_build$i epoch_ms ${E[$i]} open_ms $(m "${O[$i]}") read_ms $(m "${R[$i]}") close_ms $(m "${C[$i]}") daemon_cpu_ms ${D[$i]}"
  done
  if [ "${#builds[@]}" -gt 1 ]; then
    awk -v n="$name" -v a="${E[1]}" -v b="${E[0]}" -v c="${D[1]}" -v d="${D[0]}" 'BEGIN {
      printf "ratio %s_epoch_base_over_this %.2f\n", n, a / b
      printf "ratio %s_daemon_cpu_base_over_this %.2f\n", n, c / d }'
  fi
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
