#!/usr/bin/env bash
# bench/incremental/run.sh - a growing corpus through the mount (issue
# "shards shared between snapshots", Speed), in one run:
#
#   append  a corpus of N (default 100) inputs of MIB_EACH (default 2)
#           MiB, one shard per input, a stage that costs (gzip -1 |
#           gunzip); every shard read once (the first full read), then
#           one input appended and every shard of the new snapshot read:
#           "runs first N", "runs append K" (the stages run: the goal is
#           1), "time first|append SECONDS", "cpu first|append SECONDS"
#           (CPU-seconds of the daemon, its stages and the reader, a
#           cpuacct cgroup) and "ratio append_vs_first" (wall, lower is
#           better) beside "ratio_cpu append_vs_first";
#   register  the time from writing a spec of INPUTS (default 10,000)
#           empty inputs to its name on the mount, with this build and
#           with BASE_BUILD (a build of the tree before shared shards;
#           made here from BASE_REV, default the commit before them, when
#           not given): "time register this|base SECONDS" (medians of
#           ROUNDS) and "ratio register_this_vs_base" (the goal: <= 1.2).
#
# usage: bench/incremental/run.sh [BUILD_DIR]  (env: N, MIB_EACH, INPUTS,
# ROUNDS=3, PARTS="append register", BASE_BUILD, BASE_REV); root (cgroups,
# drop_caches); /dev/fuse.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-${MF_BUILD_ROOT:-$src/build}}
build=$(cd "$build" && pwd)
n=${N:-100} mib=${MIB_EACH:-2} inputs=${INPUTS:-10000} rounds=${ROUNDS:-3}
parts=${PARTS:-append register}
gen=$build/bench/engine/gen
for x in "$build/tools/matfs" "$gen"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "no /dev/fuse" >&2; exit 77; }
[ "$(id -u)" = 0 ] || { echo "run as root (cgroups, drop_caches)" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-incr.XXXXXX)
mnt=$tmp/mnt dpid=
cgroot=/sys/fs/cgroup/cpuacct cg=
if [ -w "$cgroot" ] && [ -r "$cgroot/cpuacct.usage" ]; then
  cg=$cgroot/mf-incr-$$
  mkdir "$cg" 2>/dev/null || cg=
fi
cleanup() {
  grep -q " $mnt fuse" /proc/self/mounts && { fusermount3 -u "$mnt" || umount -l "$mnt"; }
  [ -n "$dpid" ] && { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }
  [ -n "${wt:-}" ] && git -C "$src" worktree remove --force "$wt" 2>/dev/null
  rm -rf "$tmp"
  local _
  for _ in $(seq 1 50); do [ -z "$cg" ] || rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
}
trap cleanup EXIT
cpu_ns() { if [ -n "$cg" ]; then cat "$cg/cpuacct.usage"; else echo 0; fi; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
now_ns() { date +%s%N; }
# mount_up MATFS STORE PIPES: a daemon in the cgroup
mount_up() {
  mkdir -p "$mnt"
  ( [ -z "$cg" ] || echo "$BASHPID" >"$cg/tasks"
    exec "$1" --store "$2" --pipelines "$3" -f -o workers=2 "$mnt" ) 2>>"$tmp/matfs.log" &
  dpid=$!
  local _
  for _ in $(seq 1 200); do grep -q " $mnt fuse" /proc/self/mounts && break; sleep 0.05; done
}
mount_down() { fusermount3 -u "$mnt"; wait "$dpid"; dpid=; }
wait_name() { # wait_name NAME [NOT-TARGET]: until NAME links elsewhere
  local _
  for _ in $(seq 1 6000); do
    [ -L "$mnt/$1" ] && [ "$(readlink "$mnt/$1")" != "${2:-}" ] && return 0
    sleep 0.01
  done
  return 1
}
read_all() { ( [ -z "$cg" ] || echo "$BASHPID" >"$cg/tasks"; exec cat "$mnt/$1"/* ) >/dev/null; }
calls() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

echo "# $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ " $parts " == *" append "* ]]; then
  mkdir -p "$tmp/in" "$tmp/p"
  for k in $(seq 0 $((n - 1))); do "$gen" "$mib" 0 $((1000 + k)) >"$tmp/in/$(printf '%04d' "$k").bin"; done
  printf 'name: corpus\ninputs: ../in/*.bin\nstages:\n  - exec: [sh, -c, "echo x >>%s; gzip -1 | gunzip"]\n' \
    "$tmp/calls" >"$tmp/p/corpus.yaml"
  mount_up "$build/tools/matfs" "$tmp/s" "$tmp/p"
  wait_name corpus || { echo "no corpus name" >&2; exit 1; }
  c0=$(cpu_ns) t0=$(now_ns)
  read_all corpus
  t1=$(now_ns) c1=$(cpu_ns)
  first_runs=$(calls "$tmp/calls")
  old=$(readlink "$mnt/corpus")
  "$gen" "$mib" 0 99999 >"$tmp/in/$(printf '%04d' "$n").bin"
  wait_name corpus "$old" || { echo "no new fingerprint" >&2; exit 1; }
  c2=$(cpu_ns) t2=$(now_ns)
  read_all corpus
  t3=$(now_ns) c3=$(cpu_ns)
  mount_down
  runs=$(( $(calls "$tmp/calls") - first_runs ))
  echo "runs first $first_runs"
  echo "runs append $runs"
  awk -v a="$((t1 - t0))" -v b="$((t3 - t2))" -v ca="$((c1 - c0))" -v cb="$((c3 - c2))" 'BEGIN {
    printf "time first %.3f\ntime append %.3f\n", a / 1e9, b / 1e9
    if (ca > 0) printf "cpu first %.3f\ncpu append %.3f\n", ca / 1e9, cb / 1e9
    printf "ratio append_vs_first %.3f\n", b / a
    if (ca > 0) printf "ratio_cpu append_vs_first %.3f\n", cb / ca }'
fi

if [[ " $parts " == *" register "* ]]; then
  base=${BASE_BUILD:-}
  if [ -z "$base" ]; then
    rev=${BASE_REV:-$(git -C "$src" log --format=%H -1 --grep='^Shards shared between snapshots')^}
    wt=$tmp/base
    git -C "$src" worktree add -q --detach "$wt" "$rev" >/dev/null 2>&1 || { echo "no base tree at $rev" >&2; exit 1; }
    (cd "$wt" && meson setup "$tmp/basebuild" >/dev/null && ninja -C "$tmp/basebuild" tools/matfs >/dev/null) ||
      { echo "base build failed" >&2; exit 1; }
    base=$tmp/basebuild
  fi
  mkdir -p "$tmp/rin"
  (cd "$tmp/rin" && seq -f '%05g.txt' 1 "$inputs" | xargs touch)
  declare -A R
  R=()
  for r in $(seq 1 "$rounds"); do
    for which in this base; do
      b=$build; [ "$which" = base ] && b=$base
      rm -rf "$tmp/rp" "$tmp/rs"
      mkdir -p "$tmp/rp"
      mount_up "$b/tools/matfs" "$tmp/rs" "$tmp/rp"
      t0=$(now_ns)
      printf 'name: wide\ninputs: ../rin/*.txt\nshards: 100\nstages:\n  - exec: [cat]\n# %s\n' "$r" \
        >"$tmp/rp/wide.yaml"
      wait_name wide || { echo "no wide name ($which)" >&2; exit 1; }
      t1=$(now_ns)
      mount_down
      R[$which]+="$((t1 - t0)) "
    done
  done
  t=$(echo "${R[this]}" | tr ' ' '\n' | grep . | median)
  tb=$(echo "${R[base]}" | tr ' ' '\n' | grep . | median)
  awk -v a="$t" -v b="$tb" 'BEGIN { printf "time register this %.3f\ntime register base %.3f\nratio register_this_vs_base %.2f\n", a / 1e9, b / 1e9, a / b }'
fi
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
