# lib.sh - the multi-host harness, sourced by every tests/cluster test: a
# real PostgreSQL 15 (tests/catalog/pg_server.sh) in a network namespace of
# its own, on a bridge there at 10.231.0.1; three hosts h1, h2, h3, each a
# network namespace with a veth to that bridge (10.231.0.11-13), its own
# PID and UTS namespace (hostname mfh1..mfh3) and mount namespace, all
# sharing one store folder and one pipelines folder; each host mounts
# matfs with the PostgreSQL catalog on its own mountpoint.
#
# A test script sources this file twice over: run by meson (no argument)
# it checks what it needs (skip, 77, without root, namespaces, FUSE or
# PostgreSQL), makes the database's namespace and runs itself again with
# "inner" inside pg_server.sh; the inner run makes the hosts. Everything
# is torn down on exit, even on failure: each host's mount unmounted and
# its PID 1 killed (which kills every process of the host), the
# namespaces deleted (with their veths and bridge), the server stopped
# and the temporary folders removed.
#
#   hx N CMD...         runs CMD on host N (all its namespaces)
#   host_up N           starts host N; host_mount N [ARGS...] mounts there
#   host_kill N         SIGKILL to host N's PID 1
#   link_down N / link_up N   cuts / restores host N's link
#
# Not a test itself.
set -uo pipefail
src=${MF_SOURCE_ROOT:?} build=${MF_BUILD_ROOT:?}
matfs=$build/tools/matfs
matctl=$build/tools/matctl
py=$(command -v python3)

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "${tmp:-/nonexistent}"/h*.log; do
    [ -s "$f" ] && { echo "--- $f:" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
pass() { echo "ok - $*"; }
skip() { echo "skip: $*"; exit 77; }

# wait_for SECONDS COMMAND...: polls every 100 ms until COMMAND succeeds.
wait_for() {
  local end=$(($(date +%s%N) + $1 * 1000000000))
  shift
  until "$@" 2>/dev/null; do
    [ "$(date +%s%N)" -lt "$end" ] || return 1
    sleep 0.1
  done
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

if [ "${1:-}" != inner ]; then
  # ---- the outer run: checks, the database's namespace, pg_server.sh ----
  [ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
  [ -e /dev/fuse ] || skip "no /dev/fuse"
  for c in ip nsenter unshare fusermount3 setpriv; do
    command -v "$c" >/dev/null || skip "no $c"
  done
  [ -x /usr/lib/postgresql/15/bin/postgres ] ||
    skip "no PostgreSQL 15 (apt-get install postgresql-15)"
  id=$(printf '%04x%04x' $((RANDOM)) $(($$ & 0xffff)))
  export MF_CL_DB=mfc-$id-db MF_CL_ID=$id
  ip netns add "$MF_CL_DB" 2>/dev/null || skip "cannot make a network namespace"
  outer_cleanup() {
    local n
    for n in 1 2 3; do ip netns del "mfc-$MF_CL_ID-h$n" 2>/dev/null; done
    ip netns del "$MF_CL_DB" 2>/dev/null
  }
  trap outer_cleanup EXIT
  trap 'exit 130' INT TERM
  ip -n "$MF_CL_DB" link set lo up &&
    ip -n "$MF_CL_DB" link add br0 type bridge &&
    ip -n "$MF_CL_DB" addr add 10.231.0.1/24 dev br0 &&
    ip -n "$MF_CL_DB" link set br0 up || fail "making the bridge"
  # a PID and UTS namespace works here, or the test cannot run
  ip netns exec "$MF_CL_DB" unshare --pid --uts --fork --mount-proc true \
    2>/dev/null || skip "cannot make PID and UTS namespaces"
  MF_PG_NETNS=$MF_CL_DB MF_PG_LISTEN=10.231.0.1 \
    "$src/tests/catalog/pg_server.sh" bash "$0" inner
  exit $?
fi

# ---- the inner run: inside pg_server.sh, the hosts ----
[ -n "${MF_PG_URL:-}" ] || fail "no MF_PG_URL"
tmp=$(mktemp -d /tmp/mf-cluster.XXXXXX)
store=$tmp/store pipes=$tmp/p
mkdir -p "$store" "$pipes"
declare -a hpid=() hjob=() hmnt_pid=()

ns_of() { echo "mfc-$MF_CL_ID-h$1"; }

# hx N CMD...: CMD on host N, in its network, PID, UTS and mount
# namespaces (nsenter forks, so CMD is a process of the host).
hx() {
  local n=$1
  shift
  nsenter -t "${hpid[$n]}" -m -p -n -u -- "$@"
}

host_up() {
  local n=$1 ns
  ns=$(ns_of "$n")
  ip netns add "$ns" || fail "netns $ns"
  ip -n "$MF_CL_DB" link add "v$n" type veth peer name eth0 netns "$ns" &&
    ip -n "$MF_CL_DB" link set "v$n" master br0 up &&
    ip -n "$ns" link set lo up &&
    ip -n "$ns" addr add "10.231.0.1$n/24" dev eth0 &&
    ip -n "$ns" link set eth0 up || fail "the link of host $n"
  # PID 1 of the host: first it detaches this mount namespace's copies
  # of other tests' FUSE mounts (a copy keeps such a mount, and so its
  # daemon, alive after its own test unmounted it), then it sleeps; its
  # death kills every process of the host
  ip netns exec "$ns" unshare --pid --uts --fork --mount-proc \
    bash -c 'hostname "$1"
      awk '\''$3 ~ /^fuse/ { print $2 }'\'' /proc/self/mounts |
        while read -r m; do umount -l "$(printf "%b" "$m")"; done
      : >"$2"
      exec sleep infinity' host "mfh$n" "$tmp/h$n.up" 2>>"$tmp/h$n.ns" &
  hjob[$n]=$!
  wait_for 20 test -e "$tmp/h$n.up" || fail "host $n did not start"
  local p
  p=$(cat "/proc/${hjob[$n]}/task/${hjob[$n]}/children" 2>/dev/null)
  hpid[$n]=${p%% *}
  [ -n "${hpid[$n]}" ] || fail "no PID 1 for host $n"
  [ "$(hx "$n" hostname)" = "mfh$n" ] || fail "host $n's hostname"
}

host_is_mounted() {
  hx "$1" grep -q " $tmp/mnt$1 fuse" /proc/self/mounts
}

# host_mount N [ARGS...]: matfs on host N at $tmp/mntN, the PostgreSQL
# catalog, the shared store and pipelines, 8 workers (more than the
# shards a test computes at once); its log in $tmp/hN.log.
host_mount() {
  local n=$1
  shift
  mkdir -p "$tmp/mnt$n"
  hx "$n" "$matfs" --store "$store" --pipelines "$pipes" \
    --catalog "$MF_PG_URL" -f -o workers=8 "$@" "$tmp/mnt$n" >>"$tmp/h$n.log" 2>&1 &
  hmnt_pid[$n]=$!
  wait_for 20 host_is_mounted "$n" || fail "matfs did not mount on host $n"
}

# host_umount N: unmounts host N's matfs and checks it exits 0 and no
# sanitizer reported.
host_umount() {
  local n=$1
  hx "$n" fusermount3 -u "$tmp/mnt$n" || fail "fusermount3 -u on host $n"
  wait "${hmnt_pid[$n]}" || fail "matfs of host $n exited $?"
  hmnt_pid[$n]=""
  ! grep -Eq 'runtime error|Sanitizer' "$tmp/h$n.log" ||
    fail "a sanitizer reported on host $n"
}

host_kill() {
  kill -KILL "${hpid[$1]}" 2>/dev/null
  wait "${hjob[$1]}" 2>/dev/null
  hpid[$1]=""
}

link_down() { ip -n "$MF_CL_DB" link set "v$1" down; }
link_up() { ip -n "$MF_CL_DB" link set "v$1" up; }

# ctl ARGS...: matctl on host 1's network (the server is reached there).
ctl() {
  hx "${ctl_host:-1}" "$matctl" --store "$store" --catalog "$MF_PG_URL" "$@"
}

inner_cleanup() {
  local n
  for n in 1 2 3; do
    [ -n "${hpid[$n]:-}" ] || continue
    [ -n "${hmnt_pid[$n]:-}" ] &&
      hx "$n" fusermount3 -u "$tmp/mnt$n" 2>/dev/null
    kill -KILL "${hpid[$n]}" 2>/dev/null
  done
  for n in 1 2 3; do
    [ -n "${hjob[$n]:-}" ] && wait "${hjob[$n]}" 2>/dev/null
    ip netns del "$(ns_of "$n")" 2>/dev/null
  done
  # every process of the hosts is gone: nothing holds the folder
  rm -rf "$tmp"
}
trap inner_cleanup EXIT
trap 'exit 130' INT TERM

# calls_of SHARD: how many times the stage ran for SHARD (lines "HOST
# SHARD" of $pipes/calls.log, which the stages append to).
calls_of() {
  [ -f "$pipes/calls.log" ] || { echo 0; return; }
  awk -v k="$1" '$2 == k && $3 != "end"' "$pipes/calls.log" | wc -l
}

# inputs: 16 input files in/00.txt..in/15.txt; shard k of 8 reads inputs
# k and k + 8. want_bytes K: the stages by hand (tr a-z A-Z) of shard K,
# into $tmp/wantK.
inputs() {
  local i
  mkdir -p "$pipes/in"
  for i in $(seq 0 15); do
    printf 'line %d of input %02d\nsecond line of %d\n' "$i" "$i" "$i" \
      >"$pipes/in/$(printf %02d "$i").txt"
  done
  for i in $(seq 0 7); do
    cat "$pipes/in/$(printf %02d "$i").txt" \
      "$pipes/in/$(printf %02d $((i + 8))).txt" | tr a-z A-Z >"$tmp/want$i"
  done
}

# spec STAGE: pipeline "cl", 8 shards, one stage run by /bin/sh -c STAGE
# (in the pipelines folder, MATFS_SHARD set).
spec() {
  cat >"$pipes/cl.yaml" <<YAML
name: cl
inputs: in/*.txt
shards: 8
stages:
  - exec: [/bin/sh, -c, '$1']
YAML
}

shard_path() { printf '%s/mnt%d/cl/shard-%05d' "$tmp" "$1" "$2"; }

# readers N [TAG]: 8 readers on host N (run it inside host N), each reading
# every shard of cl in an order of its own into $tmp/out/TAGhN-rJ-K; a
# failed read is noted in $tmp/errors. Export it, shard_path and tmp for
# `hx N bash -c`.
readers() {
  local n=$1 tag=${2:-} j k
  for j in $(seq 1 8); do
    (for k in $(shuf -i 0-7); do
       cat "$(shard_path "$n" "$k")" >"$tmp/out/${tag}h$n-r$j-$k" ||
         echo "${tag}host $n reader $j shard $k: cat failed" >>"$tmp/errors"
     done) &
  done
  wait
}

# registered N: host N lists pipeline cl.
registered() { hx "$1" test -L "$tmp/mnt$1/cl"; }

# xattr N SHARD NAME: user.matfs.NAME of shard SHARD on host N, or nothing.
xattr() {
  hx "$1" "$py" -c 'import os, sys
try:
    print(os.getxattr(sys.argv[1], "user.matfs." + sys.argv[2]).decode())
except OSError:
    pass' "$(shard_path "$1" "$2")" "$3"
}

# run_dirs_with PATTERN: the run folders of the store holding a file
# named PATTERN (a glob), one a line.
run_dirs_with() {
  find "$store/snapshots" -mindepth 3 -maxdepth 3 -name "$1" \
    -printf '%h\n' 2>/dev/null | sort -u
}

# read_bg N SHARD OUT: host N reads SHARD into OUT in the background
# (pid appended to readers); a failed read leaves OUT.failed.
readers=()
read_bg() {
  hx "$1" sh -c 'cat "$1" >"$2" || : >"$2.failed"' sh \
    "$(shard_path "$1" "$2")" "$3" &
  readers+=($!)
}
