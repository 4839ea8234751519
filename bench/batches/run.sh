#!/usr/bin/env bash
# bench/batches/run.sh - batches as files against shards, in one run
# (issue "Batches as files", Speed; docs/performance.md says what each
# figure means):
#
#   warm    every batch of one epoch (seed 1, W=1, batches of BATCH_KIB
#           KiB, default 512)
#           read through a fresh mount of a materialized snapshot of MIB
#           MiB in 16 shards, against the same snapshot's shards read in
#           order through a fresh mount; page caches dropped before each.
#           Two snapshots: zstd:3 with 2 KiB records, codec none with
#           256-byte records (shuffle_window 64MiB, chunks of 4 MiB).
#           "gbps", "ratio warm_* (batches over shards)", and "cpu" as
#           CPU-seconds per GiB of the daemon and the reader together
#           (a cpuacct cgroup holds both); "stall": the longest batch
#           after batch 0 (a window's first batch waiting for its chunks)
#           and the median batch, medians over the rounds;
#   memory  the daemon's largest RSS while the zstd:3 epoch is read
#           (sampled every 20 ms), beside the chunk cache budget plus
#           shuffle_window;
#   cold    the time to the first batch (B=64) of a cold 16-shard
#           snapshot against the time to compute one shard, each on a new
#           store: a stage that waits (sleep 1; cat) with workers=8, at
#           the default shuffle_window (one group of all 16 shards, as the
#           snapshot is smaller than the window) and at 16MiB (a first
#           group of 8 shards), and a stage that computes (gzip -1 |
#           gunzip) with workers=2 (this machine's cores);
#   resume  the time to open and read the first batch of a view resuming
#           at global batch 10^6 (rank-0-of-1-from-1000000, B=1) of an
#           epoch of 2^21 batches (8-byte records), against the view's own batch 0, each on
#           a fresh mount (the order built by the open).
#
# usage: bench/batches/run.sh [BUILD_DIR]  (env: MIB=256, ROUNDS=3, BATCH_KIB=512,
# PARTS="warm cold resume"); root (drop_caches, cgroups); /dev/fuse.
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd)
mib=${MIB:-256} rounds=${ROUNDS:-3} parts=${PARTS:-warm cold resume} bkib=${BATCH_KIB:-512}
matfs=$build/tools/matfs gen=$build/bench/engine/gen py=/usr/bin/python3
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
[ "$(id -u)" = 0 ] || { echo "run as root (drop_caches, cgroups)" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-batches.XXXXXX)
mnt=$tmp/mnt dpid=
cgroot=/sys/fs/cgroup/cpuacct cg=
if [ -w "$cgroot" ] && [ -r "$cgroot/cpuacct.usage" ]; then
  cg=$cgroot/mf-batches-$$
  mkdir "$cg" 2>/dev/null || cg=
fi
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp"
  local _
  for _ in $(seq 1 50); do [ -z "$cg" ] || rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
}
trap cleanup EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
cpu_ns() { if [ -n "$cg" ]; then cat "$cg/cpuacct.usage"; else echo 0; fi; }
# mount_up STORE PIPES [OPTS]: a daemon in the cgroup
mount_up() {
  mkdir -p "$mnt"
  ( [ -z "$cg" ] || echo "$BASHPID" >"$cg/tasks"
    exec "$matfs" --store "$1" --pipelines "$2" -f ${3:+-o "$3"} "$mnt" ) \
    2>>"$tmp/matfs.log" &
  dpid=$!
  local _
  for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
  ls "$mnt" >/dev/null
}
mount_down() { fusermount3 -u "$mnt"; wait "$dpid"; dpid=; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# reader MODE ARGS...: the Python reader in the cgroup; prints "BYTES NS"
reader() {
  ( [ -z "$cg" ] || echo "$BASHPID" >"$cg/tasks"; exec "$py" - "$@" ) <<'PY'
import errno, os, sys, time
mode, args = sys.argv[1], sys.argv[2:]
buf = bytearray(1 << 20)
def read_all(p):
    fd = os.open(p, os.O_RDONLY)
    n = 0
    try:
        while True:
            k = os.readv(fd, [buf])
            if k == 0:
                return n
            n += k
    finally:
        os.close(fd)
t0 = time.perf_counter_ns()
total = 0
if mode == "shards":
    d = args[0]
    for f in sorted(os.listdir(d)):
        total += read_all(os.path.join(d, f))
elif mode == "batches":  # every batch of the view, by number until ENOENT
    n, lat = 0, []
    while True:
        t = time.perf_counter_ns()
        try:
            total += read_all(os.path.join(args[0], "batch-%06d" % n))
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
            break
        lat.append(time.perf_counter_ns() - t)
        n += 1
    # the longest wait after batch 0 (a window's first batch waiting for
    # its chunks) and the median batch, in ms
    rest = sorted(lat[1:]) or [0]
    print(total, time.perf_counter_ns() - t0, "%.2f %.3f" % (rest[-1] / 1e6, rest[len(rest) // 2] / 1e6))
    sys.exit(0)
elif mode == "one":
    total = read_all(args[0])
print(total, time.perf_counter_ns() - t0)
PY
}
# rss_sampler PID OUT: the largest VmRSS (kB) of PID until killed
rss_sampler() {
  local max=0 v
  while kill -0 "$1" 2>/dev/null; do
    v=$(awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null)
    [ -n "$v" ] && [ "$v" -gt "$max" ] && { max=$v; echo "$max" >"$2"; }
    sleep 0.02
  done
}

echo "# $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $mib MiB, $rounds rounds"
mkdir -p "$tmp/in"
for k in $(seq 0 15); do "$gen" $((mib / 16)) 0 $((500 + k)) >"$tmp/in/$k.bin"; done

if [[ " $parts " == *" warm "* ]]; then
  for cfg in "zstd:3 2048" "none 256"; do
    read -r codec rsize <<<"$cfg"
    name=w${codec%%:*}
    pipes=$tmp/p-$name store=$tmp/s-$name
    mkdir -p "$pipes"
    printf 'name: %s\ninputs: ../in/*.bin\nshards: 16\ncompression: %s\nrecords: %s\nshuffle_window: 64MiB\nstages:\n  - exec: [cat]\n' \
      "$name" "$codec" "$rsize" >"$pipes/$name.yaml"
    mount_up "$store" "$pipes"
    for _ in $(seq 1 200); do [ -L "$mnt/$name" ] && break; sleep 0.05; done
    cat "$mnt/$name"/* >/dev/null # materialized
    fp=$(readlink "$mnt/$name")
    mount_down
    b=$((bkib * 1024 / rsize))
    view=$mnt/$fp/batches/$b/seed-1/epoch-0/rank-0-of-1
    declare -A T C
    T=() C=() W= M=
    for r in $(seq 1 "$rounds"); do
      for w in shards batches; do
        drop
        mount_up "$store" "$pipes"
        [ "$w" = batches ] && [ "$r" = 1 ] && [ "$codec" = zstd:3 ] &&
          { rss_sampler "$dpid" "$tmp/rss" & }
        c0=$(cpu_ns)
        if [ "$w" = shards ]; then
          read -r bytes ns < <(reader shards "$mnt/$fp")
        else
          read -r bytes ns worst med < <(reader batches "$view")
          W+="$worst " M+="$med "
        fi
        c1=$(cpu_ns)
        T[$w]+="$ns " C[$w]+="$((c1 - c0)) "
        [ "$w" = batches ] && echo "# $name batches: $bytes bytes in $((ns / 1000000)) ms"
        [ "$w" = shards ] && echo "# $name shards: $bytes bytes in $((ns / 1000000)) ms"
        mount_down
      done
    done
    for w in shards batches; do
      t=$(echo "${T[$w]}" | tr ' ' '\n' | grep . | median)
      c=$(echo "${C[$w]}" | tr ' ' '\n' | grep . | median)
      T[$w]=$t
      awk -v n="${name}_$w" -v ns="$t" -v m="$mib" \
        'BEGIN { printf "gbps %s %.3f\n", n, m * 1048576 / ns }'
      [ -n "$cg" ] && awk -v n="${name}_$w" -v c="$c" -v m="$mib" \
        'BEGIN { printf "cpu %s %.3f s/GiB\n", n, c / 1e9 / (m / 1024) }'
    done
    echo "stall ${name}_longest_batch_after_0 $(echo "$W" | tr ' ' '\n' | grep . | median) ms, median batch $(echo "$M" | tr ' ' '\n' | grep . | median) ms"
    awk -v n="$name" -v s="${T[shards]}" -v b="${T[batches]}" \
      'BEGIN { printf "ratio warm_%s_batches_vs_shards %.2f\n", n, s / b }'
    if [ "$codec" = zstd:3 ] && [ -s "$tmp/rss" ]; then
      awk -v kb="$(cat "$tmp/rss")" 'BEGIN { printf "memory rss_max_mib %.0f (budget: cache 256 + shuffle_window 64 = 320)\n", kb / 1024 }'
    fi
  done
fi

if [[ " $parts " == *" cold "* ]]; then
  for cfg in "wait 8 256MiB" "wait 8 16MiB" "compute 2 256MiB"; do
    read -r kind workers window <<<"$cfg"
    if [ "$kind" = wait ]; then
      stage='[sh, -c, "sleep 1; cat"]'
    else
      stage='[sh, -c, "gzip -1 | gunzip"]'
    fi
    pipes=$tmp/p-cold-$kind-$window
    mkdir -p "$pipes"
    printf 'name: cold\ninputs: ../in/*.bin\nshards: 16\nrecords: 2048\nshuffle_window: %s\nstages:\n  - exec: %s\n' \
      "$window" "$stage" >"$pipes/cold.yaml"
    declare -A CT
    CT=()
    for r in $(seq 1 "$rounds"); do
      for w in shard batch; do
        rm -rf "$tmp/s-cold"
        drop
        mount_up "$tmp/s-cold" "$pipes" "workers=$workers"
        for _ in $(seq 1 200); do [ -L "$mnt/cold" ] && break; sleep 0.05; done
        if [ "$w" = shard ]; then
          read -r bytes ns < <(reader one "$mnt/cold/shard-00000")
        else
          read -r bytes ns < <(reader one "$mnt/cold/batches/64/seed-1/epoch-0/batch-000000")
        fi
        [ "$bytes" -gt 0 ] || { echo "cold $w read nothing" >&2; exit 1; }
        CT[$w]+="$ns "
        mount_down
      done
    done
    s=$(echo "${CT[shard]}" | tr ' ' '\n' | grep . | median)
    b=$(echo "${CT[batch]}" | tr ' ' '\n' | grep . | median)
    awk -v k="$kind" -v w="$workers" -v win="$window" -v s="$s" -v b="$b" 'BEGIN {
      printf "cold %s_workers%s_window%s one_shard_ms %.0f first_batch_ms %.0f\n", k, w, win, s / 1e6, b / 1e6
      printf "ratio cold_%s_workers%s_window%s_first_batch_vs_one_shard %.2f\n", k, w, win, b / s }'
  done
fi

if [[ " $parts " == *" resume "* ]]; then
  pipes=$tmp/p-big store=$tmp/s-big
  mkdir -p "$pipes"
  # 16 MiB of 8-byte records: 2^21 batches of 1
  printf 'name: big\ninputs: ../in/*.bin\nshards: 16\nrecords: 8\nstages:\n  - exec: [head, -c, "1048576"]\n' >"$pipes/big.yaml"
  mount_up "$store" "$pipes"
  for _ in $(seq 1 200); do [ -L "$mnt/big" ] && break; sleep 0.05; done
  cat "$mnt/big"/* >/dev/null
  fp=$(readlink "$mnt/big")
  mount_down
  declare -A RT
  RT=()
  for r in $(seq 1 "$rounds"); do
    for w in start resume; do
      mount_up "$store" "$pipes"
      if [ "$w" = start ]; then
        p=$mnt/$fp/batches/1/seed-1/epoch-0/rank-0-of-1/batch-000000
      else
        p=$mnt/$fp/batches/1/seed-1/epoch-0/rank-0-of-1-from-1000000/batch-000000
      fi
      read -r bytes ns < <(reader one "$p")
      [ "$bytes" = 8 ] || { echo "resume $w read $bytes bytes" >&2; exit 1; }
      RT[$w]+="$ns "
      mount_down
    done
  done
  s=$(echo "${RT[start]}" | tr ' ' '\n' | grep . | median)
  e=$(echo "${RT[resume]}" | tr ' ' '\n' | grep . | median)
  awk -v s="$s" -v e="$e" 'BEGIN {
    printf "resume start_ms %.1f at_1e6_ms %.1f\n", s / 1e6, e / 1e6
    printf "ratio resume_at_1e6_vs_start %.2f\n", e / s }'
fi
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
