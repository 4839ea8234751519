#!/usr/bin/env bash
# test_matctl_escapes.sh - what a stage wrote reaches the terminal cleaned,
# as the daemon's log is: a failing stage's stderr holds an OSC 52
# clipboard write, a clear-screen, a title, a C1 control and a bad UTF-8
# byte; matctl warm's error, matctl cat's error and matctl stat's error
# and stderr lines show '?' for each, never the escape bytes (an admin's
# terminal obeyed them before), and keep the text and UTF-8 around them.
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
tmp=$(mktemp -d /tmp/mf-esc.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
m() { "$matctl" --store "$tmp/store" "$@"; }

mkdir -p "$tmp/p/in"
echo x >"$tmp/p/in/a.txt"
cat >"$tmp/p/esc.yaml" <<'YAML'
name: esc
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; printf "\033]52;c;ZWNobw==\007\033[2J\302\233x\377 évil\n" >&2; exit 1']
YAML
# has_escape FILE: an ESC, BEL, C1 CSI or 0xff byte is in FILE
has_escape() { LC_ALL=C grep -q $'\033\|\007\|\302\233\|\377' "$1"; }
m warm "$tmp/p/esc.yaml" >/dev/null 2>"$tmp/warm.err" && fail "warm of a failing stage succeeded"
grep -q "évil" "$tmp/warm.err" || fail "warm's error lacks the stage's text: $(cat -v "$tmp/warm.err")"
! has_escape "$tmp/warm.err" || fail "warm printed escapes: $(cat -v "$tmp/warm.err")"
m cat esc 0 >/dev/null 2>"$tmp/cat.err" && fail "cat of a failing shard succeeded"
! has_escape "$tmp/cat.err" || fail "cat printed escapes: $(cat -v "$tmp/cat.err")"
m stat esc >"$tmp/stat.out" 2>&1
grep -q "évil" "$tmp/stat.out" || fail "stat lacks the stderr: $(cat -v "$tmp/stat.out")"
! has_escape "$tmp/stat.out" || fail "stat printed escapes: $(cat -v "$tmp/stat.out")"
pass "a stage's escapes reach matctl's output as '?'"
