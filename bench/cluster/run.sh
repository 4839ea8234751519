#!/usr/bin/env bash
# bench/cluster/run.sh - the PostgreSQL catalog against SQLite on one host,
# in one run, with a throwaway PostgreSQL 15 that it starts and always
# stops (tests/catalog/pg_server.sh; fsync off there, and SQLite's WAL
# with synchronous=NORMAL does not sync a commit either):
#
#   claims   claim + complete of SHARDS tiny shards through the catalog
#            API, one thread, then THREADS threads with a connection each
#            (bench/cluster/claims.c): "rate" lines in claims per second,
#            "ratio pg_vs_sqlite_t1" and "_tTHREADS", PostgreSQL's rate over
#            SQLite's (higher is better)
#   ls       ls -l of a snapshot of SHARDS shards through a mount on a
#            PostgreSQL catalog against the same on SQLite: two stores of
#            the same layout from the same spec, mounted afresh each round;
#            the first ls -l of a mount (cold) and the next one (warm):
#            "ratio ls_cold_pg_vs_sqlite", "ratio ls_warm_pg_vs_sqlite",
#            time over time (lower is better)
#   runs     HOSTS daemons on this host sharing one store and one
#            PostgreSQL catalog, READERS readers through each, each reader
#            reading all PER shards of a fresh snapshot at once (in its own
#            order); the stage logs every run: "ratio stage_runs_per_shard"
#            (goal, and only correct value: 1.00), and every reader's bytes
#            must be the stages by hand
#   wake     two daemons on one store and catalog: a shard computed
#            through A while a reader through B waits for it
#            (bench/cluster/wake.py, WAKES samples); the latency from A's
#            open returning, just after its commit, to B's: "time
#            wake_notify_p50" and "_p90" with LISTEN/NOTIFY, "time
#            wake_poll_p50" and "_p90" with both daemons polling
#            (MATFS_CATALOG_NOTIFY=0, the fallback and SQLite's way), in
#            seconds; "ratio wake_poll_vs_notify_p50" (higher is better;
#            goal: notify's p50 under 20 ms); and, for context, from the
#            gate that ends A's stage to B's open ("_gate_p50")
#
# Medians of ROUNDS interleaved rounds. Prints "time", "rate", "count" and
# "ratio" lines; exits 1 when a check fails (a wrong byte, a claim that was
# not exclusive).
# usage: bench/cluster/run.sh [BUILD_DIR]
#   env: SHARDS (10000) THREADS (8) ROUNDS (3) HOSTS (3) READERS (8) PER (8)
#        WAKES (20)
# Without BUILD_DIR (or MF_BUILD_ROOT) it builds build/bench
# (bench/build.sh). Needs /dev/fuse, fusermount3 and PostgreSQL 15's
# binaries (skips, 77, without them).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${MF_PG_URL:-}" ]; then
  if [ $# -eq 0 ] && [ -z "${MF_BUILD_ROOT:-}" ]; then
    "$root/bench/build.sh" || exit 1
    set -- "$root/build/bench"
  fi
  exec "$root/tests/catalog/pg_server.sh" "$0" "$@"
fi
build=$(cd "${1:-${MF_BUILD_ROOT:-$root/build/bench}}" && pwd)
shards=${SHARDS:-10000} threads=${THREADS:-8} rounds=${ROUNDS:-3}
hosts=${HOSTS:-3} readers=${READERS:-8} per=${PER:-8} wakes=${WAKES:-20}
matfs=$build/tools/matfs claims=$build/bench/cluster/claims
for x in "$matfs" "$claims"; do [ -x "$x" ] || { echo "missing $x: build first" >&2; exit 1; }; done
[ -e /dev/fuse ] || { echo "skip: no /dev/fuse" >&2; exit 77; }
command -v fusermount3 >/dev/null || { echo "skip: no fusermount3" >&2; exit 77; }

tmp=$(mktemp -d /var/tmp/mf-bench-cluster.XXXXXX)
mounts=() daemons=()
cleanup() {
  local m p
  for m in "${mounts[@]}"; do
    grep -q " $m fuse" /proc/self/mounts &&
      { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
  done
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
  echo "run.sh: $*" >&2
  local f
  for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
now() { date +%s%N; }
# timeit CMD...: seconds CMD took (stdout to /dev/null)
timeit() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null || die "failed: $*"
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v x="$2" -v y="$3" -v n="$1" 'BEGIN { if (y > 0) printf "ratio %s %.2f\n", n, x / y; else printf "ratio %s inf\n", n }'; }

# A schema of its own for each part, owned by the bench's role: the
# catalogs of different stores never share tables.
# pg_url SCHEMA: MF_PG_URL with SCHEMA as the search path
pg_url() { echo "${MF_PG_URL/search_path%3Dmatfs/search_path%3D$1}"; }
"$(command -v psql || echo "$MF_PG_BIN/psql")" -q -X -v ON_ERROR_STOP=1 "$MF_PG_ADMIN" \
  -c 'CREATE SCHEMA ls AUTHORIZATION matfs; CREATE SCHEMA runs AUTHORIZATION matfs;
      CREATE SCHEMA wake AUTHORIZATION matfs' ||
  die "creating the schemas"

# mount_up NAME MOUNTPOINT STORE PIPELINES [ARGS...]: a daemon in the
# foreground (in the background of this shell), its log NAME.log, with
# the environment the array denv adds; sets $dpid once the mount is up.
denv=()
mount_up() {
  local name=$1 mnt=$2 store=$3 pipes=$4 _
  shift 4
  mkdir -p "$mnt"
  env "${denv[@]}" "$matfs" --store "$store" --pipelines "$pipes" "$@" -f "$mnt" \
    2>>"$tmp/$name.log" &
  dpid=$!
  daemons+=("$dpid") mounts+=("$mnt")
  for _ in $(seq 1 400); do grep -q " $mnt fuse" /proc/self/mounts && return 0; sleep 0.05; done
  die "$mnt did not come up"
}
mount_down() { # MOUNTPOINT PID: a daemon that exits with an error fails
  fusermount3 -u "$1" || die "unmounting $1"
  wait "$2" || die "the daemon of $1 exited with status $?"
}
# wait_link PATH: until the snapshot's symlink is there (60 s)
wait_link() {
  local _
  for _ in $(seq 1 1200); do [ -L "$1" ] && return 0; sleep 0.05; done
  die "$1 did not appear"
}

echo "# $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $shards shards, $rounds rounds"

# --- claims ---
"$claims" --sqlite "$tmp/claims.db" --pg "$MF_PG_URL" --shards "$shards" \
  --threads "$threads" --rounds "$rounds" || die "claims failed"
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"

# --- ls -l of SHARDS shards, SQLite against PostgreSQL ---
p=$tmp/p
mkdir -p "$p/many"
(cd "$p/many" && seq -f 'f%05g.txt' 0 $((shards - 1)) | xargs touch)
printf 'name: many\ninputs: many/*.txt\nstages:\n  - exec: [cat]\n' >"$p/many.yaml"
declare -A T
for r in $(seq 1 "$rounds"); do
  mount_up ls-sqlite "$tmp/m-sq" "$tmp/s-sq" "$p"
  sq=$dpid
  mount_up ls-pg "$tmp/m-pg" "$tmp/s-pg" "$p" --catalog "$(pg_url ls)"
  pg=$dpid
  wait_link "$tmp/m-sq/many"
  wait_link "$tmp/m-pg/many"
  # alternate which goes first
  order="sq pg"
  [ $((r % 2)) -eq 0 ] && order="pg sq"
  for k in $order; do T[cold_$k]+="$(timeit ls -l "$tmp/m-$k/many/") "; done
  for k in $order; do T[warm_$k]+="$(timeit ls -l "$tmp/m-$k/many/") "; done
  n_sq=$(ls "$tmp/m-sq/many/" | wc -l) n_pg=$(ls "$tmp/m-pg/many/" | wc -l)
  [ "$n_sq" -eq "$shards" ] && [ "$n_pg" -eq "$shards" ] ||
    die "ls lists $n_sq (SQLite) and $n_pg (PostgreSQL) shards, not $shards"
  mount_down "$tmp/m-sq" "$sq"
  mount_down "$tmp/m-pg" "$pg"
done
for k in cold_sq cold_pg warm_sq warm_pg; do
  T[$k]=$(echo "${T[$k]}" | median)
  echo "time ls_$k ${T[$k]}"
done
ratio ls_cold_pg_vs_sqlite "${T[cold_pg]}" "${T[cold_sq]}"
ratio ls_warm_pg_vs_sqlite "${T[warm_pg]}" "${T[warm_sq]}"

# --- stage runs per shard: HOSTS daemons, one store, one catalog ---
q=$tmp/q store=$tmp/s-runs
mkdir -p "$q/in"
for k in $(seq 0 $((per - 1))); do printf 'input %d of the runs bench\n' "$k" >"$q/in/$k.txt"; done
for h in $(seq 1 "$hosts"); do
  mount_up "runs-$h" "$tmp/m-runs-$h" "$store" "$q" --catalog "$(pg_url runs)"
done
# read_all MOUNTPOINT NAME FIRST OUT: every shard of NAME, from FIRST on
read_all() {
  local i
  for i in $(seq 0 $((per - 1))); do
    cat "$1/$2/shard-$(printf %05d $(( ($3 + i) % per )))" || return 1
  done >"$4"
}
for r in $(seq 1 "$rounds"); do
  name=runs$r
  # the stage logs each run, then takes a moment, so readers pile up
  cat >"$q/$name.yaml" <<YAML
name: $name
inputs: in/*.txt
shards: $per
stages:
  - exec: [/bin/sh, -c, 'echo "\$MATFS_SHARD" >>$tmp/stage-$name; sleep 0.2; tr a-z A-Z']
YAML
  want=$tmp/want-$name
  for k in $(seq 0 $((per - 1))); do tr a-z A-Z <"$q/in/$k.txt" >"$want.$k"; done
  for h in $(seq 1 "$hosts"); do wait_link "$tmp/m-runs-$h/$name"; done
  pids=()
  for h in $(seq 1 "$hosts"); do
    for j in $(seq 1 "$readers"); do
      read_all "$tmp/m-runs-$h" "$name" "$j" "$tmp/out-$name-$h-$j" &
      pids+=($!)
    done
  done
  for x in "${pids[@]}"; do wait "$x" || die "a reader of $name failed"; done
  for h in $(seq 1 "$hosts"); do
    for j in $(seq 1 "$readers"); do
      for i in $(seq 0 $((per - 1))); do cat "$want.$(( (j + i) % per ))"; done |
        cmp -s - "$tmp/out-$name-$h-$j" ||
        die "reader $j through daemon $h read other bytes than the stages by hand"
    done
  done
  runs=$(wc -l <"$tmp/stage-$name")
  T[runs]=$(( ${T[runs]:-0} + runs ))
  [ "$(sort -u "$tmp/stage-$name" | wc -l)" -eq "$per" ] ||
    die "$name: not every shard ran: $(sort -n "$tmp/stage-$name" | tr '\n' ' ')"
done
for h in "${!mounts[@]}"; do
  case ${mounts[$h]} in *m-runs-*) mount_down "${mounts[$h]}" "${daemons[$h]}" ;; esac
done
echo "count readers $((hosts * readers * rounds)) (each of $per shards, through $hosts daemons)"
echo "count stage_runs ${T[runs]} (of $((per * rounds)) shards)"
ratio stage_runs_per_shard "${T[runs]}" "$((per * rounds))"
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "${T[runs]}" -eq "$((per * rounds))" ] || die "a shard ran more than once"

# --- wake-up latency: a commit through daemon A to a waiter's open through B ---
w=$tmp/w
mkdir -p "$w/in"
# named so that their sorted order is their shard's: input k is shard k
for k in $(seq 0 $((wakes - 1))); do printf 'wake input %d\n' "$k" >"$w/in/$(printf %05d "$k").txt"; done
# pct P FILE COLUMN: the P-th percentile (nearest rank) of a column, in s
pct() {
  awk -v c="$3" '{ print $c }' "$2" | sort -g |
    awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; printf "%.4f\n", v[i] / 1000 }'
}
for mode in notify poll; do
  name=wake-$mode gates=$tmp/gates-$mode
  mkdir -p "$gates"
  for k in $(seq 0 $((wakes - 1))); do mkfifo "$gates/$k"; done
  # the stage waits for its gate (a FIFO the bench writes), then copies
  cat >"$w/$name.yaml" <<YAML
name: $name
inputs: in/*.txt
shards: $wakes
stages:
  - exec: [/bin/sh, -c, 'read go <$gates/\$MATFS_SHARD; cat']
YAML
  denv=()
  [ "$mode" = poll ] && denv=(MATFS_CATALOG_NOTIFY=0)
  mount_up "wake-a-$mode" "$tmp/m-wa" "$tmp/s-wake" "$w" --catalog "$(pg_url wake)"
  wa=$dpid
  mount_up "wake-b-$mode" "$tmp/m-wb" "$tmp/s-wake" "$w" --catalog "$(pg_url wake)"
  wb=$dpid
  denv=()
  wait_link "$tmp/m-wa/$name"
  wait_link "$tmp/m-wb/$name"
  python3 "$root/bench/cluster/wake.py" "$tmp/m-wa" "$tmp/m-wb" "$name" \
    "$wakes" "$gates" "$w/in" >"$tmp/wake-$mode.out" ||
    die "wake ($mode) failed: $(cat "$tmp/wake-$mode.out")"
  mount_down "$tmp/m-wa" "$wa"
  mount_down "$tmp/m-wb" "$wb"
  for p in 50 90; do
    T[wake_${mode}_p$p]=$(pct "$p" "$tmp/wake-$mode.out" 3)
    echo "time wake_${mode}_p$p ${T[wake_${mode}_p$p]}"
  done
  echo "time wake_${mode}_gate_p50 $(pct 50 "$tmp/wake-$mode.out" 4)"
done
echo "count wake_samples $wakes (per mode)"
ratio wake_poll_vs_notify_p50 "${T[wake_poll_p50]}" "${T[wake_notify_p50]}"
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
