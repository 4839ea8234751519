#!/usr/bin/env bash
# pg_server.sh - a throwaway PostgreSQL 15 for the tests, from Debian's
# binaries: initdb into a temporary folder as an unprivileged user
# (nobody, when run as root), listening on 127.0.0.1 at a free port and on
# a unix socket in that folder; always stopped and removed on exit, even
# when the command fails or is killed.
#
#   pg_server.sh COMMAND [ARGS...]   runs COMMAND with the server up and
#                                     exits with its status
#   pg_server.sh restart              (from inside COMMAND) restarts it
#   pg_server.sh stop | start         (from inside COMMAND) stops it, or
#                                     starts it again after a stop
#   pg_server.sh kill9                (from inside COMMAND) SIGKILLs the
#                                     postmaster; start brings it back
#
# COMMAND gets MF_PG_URL, a location for a role "matfs" that owns nothing
# but its schema "matfs" (search_path set by options=-csearch_path=matfs),
# MF_TEST_CATALOG_LOCATION (the same), MF_PG_ADMIN (a location of the
# superuser "postgres" on database matfs, over the unix socket),
# MF_PG_DATA, MF_PG_BIN, MF_PG_RUNAS and MF_PG_SERVER (this script). Exits 77 (skip) only when the binaries
# are missing. Not a test itself.
#
# With MF_PG_NETNS=NAME the server runs in that network namespace
# (/run/netns/NAME, entered with nsenter --net only: no mount namespace of
# its own) and listens on MF_PG_LISTEN (an address there, default
# 127.0.0.1), which MF_PG_URL then names; clients of that address's
# subnet are trusted.
set -uo pipefail

bin=${MF_PG_BIN:-/usr/lib/postgresql/15/bin}

# as_owner CMD...: runs CMD as the server's unprivileged owner.
as_owner() {
  if [ -n "${MF_PG_RUNAS:-}" ]; then
    setpriv --reuid="$MF_PG_RUNAS" --regid="$(id -g "$MF_PG_RUNAS")" \
      --clear-groups -- "$@"
  else
    "$@"
  fi
}

start() {
  local pre=()
  [ -n "${MF_PG_NETNS:-}" ] && pre=(nsenter --net="/run/netns/$MF_PG_NETNS" --)
  [ -n "${MF_PG_RUNAS:-}" ] && pre+=(setpriv --reuid="$MF_PG_RUNAS" \
    --regid="$(id -g "$MF_PG_RUNAS")" --clear-groups --)
  "${pre[@]}" "$bin/pg_ctl" -D "$MF_PG_DATA" -l "$MF_PG_DATA/../server.log" \
    -w -t 60 -o "-p $MF_PG_PORT" start >/dev/null
}

if [ "${1:-}" = restart ]; then
  : "${MF_PG_DATA:?restart runs inside pg_server.sh}"
  as_owner "$bin/pg_ctl" -D "$MF_PG_DATA" -w -t 60 -m fast stop >/dev/null &&
    start
  exit
fi
# kill9: SIGKILL to the postmaster, as a crash would; returns once every
# process of that server is gone (its backends and helpers notice their
# postmaster's death and exit; until they have, they keep its shared
# memory and a new postmaster would refuse to start). "start" then runs
# crash recovery.
if [ "${1:-}" = kill9 ]; then
  : "${MF_PG_DATA:?kill9 runs inside pg_server.sh}"
  pm=$(head -n 1 "$MF_PG_DATA/postmaster.pid") || exit 1
  procs="$pm $(pgrep -P "$pm" | tr '\n' ' ')"
  kill -KILL "$pm" || exit 1
  live() { # a process that exists and is not a zombie
    local st
    st=$(awk '{ sub(/.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
  }
  for _ in $(seq 1 600); do
    left=0
    for p in $procs; do live "$p" && left=1; done
    if [ "$left" -eq 0 ]; then
      # the postmaster may stay a zombie (a PID 1 here that does not
      # reap), which the new one's lock-file check takes for alive; what
      # an init reaping it would leave is no lock file of a live server
      rm -f "$MF_PG_DATA/postmaster.pid" \
        "$(dirname "$MF_PG_DATA")/.s.PGSQL.$MF_PG_PORT.lock"
      exit 0
    fi
    sleep 0.1
  done
  echo "pg_server.sh: the killed server's processes did not exit" >&2
  exit 1
fi
if [ "${1:-}" = stop ] || [ "${1:-}" = start ]; then
  : "${MF_PG_DATA:?$1 runs inside pg_server.sh}"
  if [ "$1" = stop ]; then
    as_owner "$bin/pg_ctl" -D "$MF_PG_DATA" -w -t 60 -m fast stop >/dev/null
  else
    start
  fi
  exit
fi

[ $# -gt 0 ] || { echo "usage: pg_server.sh COMMAND [ARGS...]" >&2; exit 2; }
for b in initdb pg_ctl postgres psql; do
  p=$bin/$b
  [ "$b" = psql ] && p=$(command -v psql || echo "$bin/psql")
  [ -x "$p" ] || { echo "skip: no $p (apt-get install postgresql)"; exit 77; }
done

dir=$(mktemp -d /tmp/mf-pg.XXXXXX)
export MF_PG_RUNAS=""
if [ "$(id -u)" -eq 0 ]; then
  export MF_PG_RUNAS=nobody
  chown nobody "$dir"
fi
chmod 700 "$dir"
export MF_PG_DATA=$dir/data MF_PG_BIN=$bin MF_PG_SERVER=$0

cleanup() {
  if [ -f "$MF_PG_DATA/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$MF_PG_DATA" -w -t 30 -m immediate stop \
      >/dev/null 2>&1
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

MF_PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MF_PG_PORT

as_owner "$bin/initdb" -D "$MF_PG_DATA" -U postgres --auth=trust \
  --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log" >&2; echo "pg_server.sh: initdb failed" >&2; exit 1; }
cat >>"$MF_PG_DATA/postgresql.conf" <<EOF
listen_addresses = '${MF_PG_LISTEN:-127.0.0.1}'
unix_socket_directories = '$dir'
fsync = off
max_connections = 200
EOF
[ -n "${MF_PG_LISTEN:-}" ] && echo "host all all samenet trust" >>"$MF_PG_DATA/pg_hba.conf"
start || { cat "$dir/server.log" >&2; exit 1; }

# a role with no rights but CREATE on its own schema
"$(command -v psql || echo "$bin/psql")" -q -X -v ON_ERROR_STOP=1 \
  -h "$dir" -p "$MF_PG_PORT" -U postgres -d postgres >/dev/null <<'EOF' ||
CREATE ROLE matfs LOGIN;
CREATE DATABASE matfs;
\c matfs
REVOKE ALL ON SCHEMA public FROM PUBLIC;
CREATE SCHEMA matfs AUTHORIZATION matfs;
EOF
  { echo "pg_server.sh: setting up the role failed" >&2; exit 1; }

export MF_PG_URL="postgresql://matfs@${MF_PG_LISTEN:-127.0.0.1}:$MF_PG_PORT/matfs?options=-csearch_path%3Dmatfs"
export MF_TEST_CATALOG_LOCATION=$MF_PG_URL
export MF_PG_ADMIN="host=$dir port=$MF_PG_PORT user=postgres dbname=matfs"
# Heartbeats are whole seconds by the server's clock, and a run whose
# heartbeat is not after the server's start keeps its claim for a grace
# (catalog/pg_live.c): one written in the very second the server started
# counts as before it. A test that declares a run dead right away must
# not start in that second.
sleep 1
"$@"
