#!/usr/bin/env bash
# bench/cold/run.sh - the cold first read through the mount (the stages
# run, their output is stored and served) against the same stages run by
# hand into a file, in one run, on MIB (default 256) MiB of Zipf-like
# token ids (bench/engine/gen) in 4 shards:
#
#   cat_none, cat_snappy, cat_zstd1, cat_zstd3
#       a `cat` stage over input files that hold gen's output (about
#       1 GB/s), with that codec
#   cat_zstd3fix
#       the same `cat` stage with zstd:3 at a fixed level
#       (compression_adapt: false): the stored size adapting gives up
#   tok_zstd3
#       gen itself as the stage, with WORK (default 32) rounds per token
#       (about 60 MB/s on the machine the issue was measured on)
#
# The hand run writes new files each round, as the mount writes new store
# files: on a machine where new memory costs more than memory just freed
# (bench/cold/pages.sh), overwriting the last round's files would give
# the hand run the cheaper pages.
#
# For each: "time NAME cold SECONDS", "time NAME hand SECONDS" (medians of
# ROUNDS rounds, a new fingerprint each round), "ratio NAME VALUE" (cold
# over hand: lower is better, 1.0 is the stages' own cost),
# "time NAME piped SECONDS" and "ratio_piped NAME VALUE": the same stages
# by hand with their input and output through pipes, as under any mount
# (`cat IN | STAGE | cat > FILE`), a floor for the mount where the hand
# run's own `cat IN > FILE` copies inside the kernel (copy_file_range,
# coreutils 9), which no stage writing to a pipe can; and
# "stored NAME BYTES" (the store's shard files, which the commit has
# written by then), and "stored_vs_fixed cat_zstd3 VALUE" (the adapted
# size over the fixed level's). "load" lines give /proc/loadavg before and after:
# ratios taken under load say little.
#
# CPU: as root on a machine with cgroup v1's cpuacct (/sys/fs/cgroup/
# cpuacct), each side runs in a cpuacct cgroup of its own, so its
# CPU-seconds are counted whatever process spends them: the daemon, its
# stages and the reader for the cold read (from the open until every
# shard is committed), and every process of the piped hand run. Per
# run: "cpu NAME cold S", "cpu NAME piped S" (CPU-seconds per GiB,
# medians of ROUNDS rounds) and "cpu_over NAME S", the median of each
# round's cold minus piped: what the mount costs above the stages piped
# into a new file. Without the controller (or as another user) there are
# no cpu lines.
#
# PRIME=1 writes and deletes 3 x MIB in /dev/shm just before each timed
# run (cold and hand alike), so that both take memory just freed rather
# than whatever the host of a virtual machine left (bench/cold/pages.sh).
#
# usage: bench/cold/run.sh [BUILD_DIR]   (env: ROUNDS, MIB, WORK, CHECK, ONLY, PERF, PRIME)
# ONLY=NAME[,NAME...] runs only those (for a quick look; the figures in
# docs/performance.md come from all of them).
# PERF=FILE then runs each one once more, untimed, on a new fingerprint,
# its cold read under `perf record -a -g -o FILE.NAME`.
# CHECK=1 also compares every shard read through the mount with the
# stage's bytes (the smoke test in bench/meson.build sets it).
# Needs /dev/fuse and fusermount3.
set -uo pipefail
build=${1:-${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)/build}}
build=$(cd "$build" && pwd) # stages run in the spec folder
rounds=${ROUNDS:-3} mib=${MIB:-256} work=${WORK:-32} check=${CHECK:-0}
shards=4 per=$((mib / shards))
[ "$per" -ge 1 ] || { echo "MIB must be 4 or more" >&2; exit 2; }
matfs=$build/tools/matfs gen=$build/bench/engine/gen
for x in "$matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
command -v fusermount3 >/dev/null || { echo "no fusermount3" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-cold.XXXXXX)
mnt=$tmp/mnt store=$tmp/store pipes=$tmp/p
dpid=
# cpuacct cgroups: cg_mount holds the daemon (and so its stages) and the
# cold reader, cg_hand the piped hand run; empty when not available
cgroot=/sys/fs/cgroup/cpuacct cg_mount= cg_hand=
if [ -w "$cgroot" ] && [ -r "$cgroot/cpuacct.usage" ]; then
  cg_mount=$cgroot/mf-cold-$$-mount cg_hand=$cgroot/mf-cold-$$-hand
  mkdir "$cg_mount" "$cg_hand" 2>/dev/null || cg_mount= cg_hand=
fi
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  rm -rf "$tmp"
  # a cgroup goes once its last task has exited
  local g _
  for g in $cg_mount $cg_hand; do
    for _ in $(seq 1 50); do rmdir "$g" 2>/dev/null && break; sleep 0.1; done
  done
}
trap cleanup EXIT

now() { date +%s%N; }
# timeit CMD...: seconds CMD took (stdout to /dev/null)
timeit() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null || { echo "failed: $*" >&2; exit 1; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# in_cg CG CMD...: CMD (a command or a function) run in cgroup CG (none
# when CG is empty), from before it starts
in_cg() {
  local g=$1
  shift
  (
    [ -z "$g" ] || echo "$BASHPID" >"$g/tasks"
    if declare -F "$1" >/dev/null; then "$@"; else exec "$@"; fi
  )
}
# usage CG: the cgroup's CPU time so far, ns
usage() { cat "$1/cpuacct.usage"; }
# per_gib NS: CPU-seconds per GiB of the run's data
per_gib() { awk -v n="$1" -v m="$mib" 'BEGIN { printf "%.4f\n", n / 1e9 / (m / 1024) }'; }
# committed NAME: every shard of NAME's snapshot is committed (the cold
# read's cost includes its commits), within 60 s
committed() {
  local n _
  for _ in $(seq 1 600); do
    n=$(getfattr --absolute-names -n user.matfs.materialized --only-values \
      "$mnt/$1" 2>/dev/null)
    [ "$n" = "$shards" ] && return 0
    sleep 0.1
  done
  echo "$1: the shards were not committed within 60 s" >&2
  exit 1
}

mount_up() {
  mkdir -p "$mnt"
  in_cg "$cg_mount" "$matfs" --store "$store" --pipelines "$pipes" -f "$mnt" \
    2>>"$tmp/matfs.log" &
  dpid=$!
  local _
  for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
  ls "$mnt" >/dev/null
}
mount_down() {
  fusermount3 -u "$mnt"
  wait "$dpid"
  dpid=
}
# wait_name NAME: the spec just written is registered
wait_name() {
  local _
  for _ in $(seq 1 200); do [ -L "$mnt/$1" ] && return 0; sleep 0.05; done
  echo "spec $1 was not registered" >&2
  exit 1
}

# --- inputs: gen's output, one file per shard ---
mkdir -p "$pipes/in"
for k in $(seq 0 $((shards - 1))); do "$gen" "$per" 0 $((100 + k)) >"$pipes/in/$k.bin"; done
# a spec of a `cat` stage (the fingerprint differs each round: KEY)
cat_spec() { # NAME COMPRESSION KEY
  printf 'name: %s\ninputs: in/*.bin\ncompression: %s\nfingerprint: %s\n' "$1" "$2" "$3"
  printf 'stages:\n  - exec: [cat]\n'
}
catfix_spec() { # NAME COMPRESSION KEY
  cat_spec "$@"
  printf 'compression_adapt: false\n'
}
tok_spec() { # NAME COMPRESSION KEY
  printf 'name: %s\ninputs: in/*.bin\ncompression: %s\nfingerprint: %s\n' "$1" "$2" "$3"
  printf "stages:\n  - exec: [/bin/sh, -c, 'cat >/dev/null; exec %s %s %s \$((MATFS_SHARD + 500))']\n" \
    "$gen" "$per" "$work"
}
hand_cat() {
  local k
  for k in $(seq 0 $((shards - 1))); do cat "$pipes/in/$k.bin" >"$hand/$k"; done
}
hand_catfix() { hand_cat; }
piped_cat() {
  local k
  for k in $(seq 0 $((shards - 1))); do cat "$pipes/in/$k.bin" | cat | cat >"$hand/p$k"; done
}
piped_catfix() { piped_cat; }
piped_tok() {
  local k
  for k in $(seq 0 $((shards - 1))); do
    cat "$pipes/in/$k.bin" |
      { cat >/dev/null; "$gen" "$per" "$work" $((k + 500)); } | cat >"$hand/p$k"
  done
}
hand_tok() {
  local k
  for k in $(seq 0 $((shards - 1))); do
    cat "$pipes/in/$k.bin" >/dev/null
    "$gen" "$per" "$work" $((k + 500)) >"$hand/$k"
  done
}
# stored NAME: bytes of the shard files of NAME's snapshot
stored() {
  local fp
  fp=$(readlink "$mnt/$1")
  find "$store/snapshots/$fp" -name '*.mfs' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'
}
# same NAME: every shard through the mount equals the stage's bytes
same() {
  local k
  for k in $(seq 0 $((shards - 1))); do
    cmp -s "$mnt/$1/shard-0000$k" "$hand/$k" || { echo "$1: shard $k differs" >&2; exit 1; }
  done
}

# prime: with PRIME=1, memory just freed for the next timed run
prime() {
  [ "${PRIME:-0}" = 1 ] || return 0
  head -c $((mib * 3))M /dev/zero >/dev/shm/mf-cold-prime.$$
  rm -f /dev/shm/mf-cold-prime.$$
}
echo "load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(nproc) cpus, $mib MiB in $shards shards, $rounds rounds, work $work"
mount_up
declare -A T S Z C
runs=(cat_none:cat:none cat_snappy:cat:snappy cat_zstd1:cat:zstd:1
  cat_zstd3:cat:zstd:3 cat_zstd3fix:catfix:zstd:3 tok_zstd3:tok:zstd:3)
if [ -n "${ONLY:-}" ]; then
  keep=()
  for x in "${runs[@]}"; do
    case ",$ONLY," in *",${x%%:*},"*) keep+=("$x") ;; esac
  done
  [ "${#keep[@]}" -gt 0 ] || { echo "ONLY names none of the runs" >&2; exit 2; }
  runs=("${keep[@]}")
fi
for r in $(seq 1 "$rounds"); do
  for x in "${runs[@]}"; do
    name=${x%%:*} rest=${x#*:}
    kind=${rest%%:*} codec=${rest#*:}
    "${kind}_spec" "$name$r" "$codec" "$name-$r-$$" >"$pipes/$name$r.yaml"
    wait_name "$name$r"
    sync # the inputs and the last round's commits are not this one's cost
    prime
    [ -n "$cg_mount" ] && u0=$(usage "$cg_mount")
    T[$name.cold]+="$(timeit in_cg "$cg_mount" cat "$mnt/$name$r"/*) "
    if [ -n "$cg_mount" ]; then
      committed "$name$r"
      C[$name.cold]+="$(per_gib $(($(usage "$cg_mount") - u0))) "
    fi
    hand=$tmp/hand/$name$r
    mkdir -p "$hand"
    prime
    T[$name.hand]+="$(timeit "hand_$kind") "
    prime
    [ -n "$cg_hand" ] && u0=$(usage "$cg_hand")
    T[$name.piped]+="$(timeit in_cg "$cg_hand" "piped_$kind") "
    [ -n "$cg_hand" ] && C[$name.piped]+="$(per_gib $(($(usage "$cg_hand") - u0))) "
    [ "$check" = 1 ] && same "$name$r"
    S[$name]=$name$r
  done
done
if [ -n "${PERF:-}" ]; then
  for x in "${runs[@]}"; do
    name=${x%%:*} rest=${x#*:}
    kind=${rest%%:*} codec=${rest#*:}
    "${kind}_spec" "${name}p" "$codec" "$name-perf-$$" >"$pipes/${name}p.yaml"
    wait_name "${name}p"
    sync
    prime
    perf record -a -g -q -o "$PERF.$name" -- cat "$mnt/${name}p"/* >/dev/null ||
      { echo "perf record failed" >&2; exit 1; }
  done
fi
mount_down
mount_up # every commit done: the stored sizes are final
for x in "${runs[@]}"; do
  name=${x%%:*}
  for w in cold hand piped; do
    T[$name.$w]=$(echo "${T[$name.$w]}" | tr ' ' '\n' | grep . | median)
    echo "time $name $w ${T[$name.$w]}"
  done
  awk -v n="$name" -v x="${T[$name.cold]}" -v y="${T[$name.hand]}" \
    -v z="${T[$name.piped]}" \
    'BEGIN { printf "ratio %s %.2f\nratio_piped %s %.2f\n", n, x / y, n, x / z }'
  if [ -n "${C[$name.cold]:-}" ]; then
    for w in cold piped; do
      echo "cpu $name $w $(echo "${C[$name.$w]}" | tr ' ' '\n' | grep . | median)"
    done
    # the median of the rounds' differences: a round's two sides ran
    # under the same load
    echo "cpu_over $name $(paste -d' ' <(echo "${C[$name.cold]}" | tr ' ' '\n' | grep .) \
      <(echo "${C[$name.piped]}" | tr ' ' '\n' | grep .) |
      awk '{ printf "%.4f\n", $1 - $2 }' | median)"
  fi
  Z[$name]=$(stored "${S[$name]}")
  echo "stored $name ${Z[$name]}"
done
if [ -n "${Z[cat_zstd3]:-}" ] && [ -n "${Z[cat_zstd3fix]:-}" ]; then
  awk -v a="${Z[cat_zstd3]}" -v b="${Z[cat_zstd3fix]}" \
    'BEGIN { printf "stored_vs_fixed cat_zstd3 %.2f\n", a / b }'
fi
mount_down
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
