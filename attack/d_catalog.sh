#!/usr/bin/env bash
# catalog.db deleted (or replaced) while mounted, then matctl in another
# process; every read must give the right bytes or an error, never 0 bytes.
set -u
b=${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/.." && pwd)/build/dev}; matctl=$b/tools/matctl
t=$(mktemp -d); mkdir -p $t/p/in $t/mnt
for k in 0 1 2 3; do echo "line $k" >$t/p/in/$k.txt; done
cat >$t/p/up.yaml <<'YAML'
name: up
inputs: in/*.txt
stages:
  - exec: [tr, a-z, A-Z]
YAML
$b/tools/matfs --store $t/store --pipelines $t/p -f $t/mnt >$t/log 2>&1 & pid=$!
trap 'fusermount3 -u $t/mnt; wait $pid; rm -rf $t' EXIT
for i in $(seq 50); do [ -L $t/mnt/up ] && break; sleep 0.2; done
fp=$(readlink $t/mnt/up)
check() { for k in 0 1 2 3; do got=$(cat $t/mnt/$fp/shard-0000$k 2>&1); [ "$got" = "LINE $k" ] || echo "  $1: shard $k: '$got' state=$(getfattr --only-values -n user.matfs.state $t/mnt/$fp/shard-0000$k 2>&1)"; done; }
check first
case ${1:-rm} in
rm) rm $t/store/catalog.db* ;;
replace) cp $t/store/catalog.db $t/c2; $matctl --store $t/store rm $fp >/dev/null; mv $t/c2 $t/store/catalog.db ;;
rmshards) rm -rf $t/store/catalog.db*; $matctl --store $t/store ls >/dev/null; $matctl --store $t/store gc; ;;
esac
$matctl --store $t/store ls >/dev/null 2>&1
check after-immediately
sleep 3; check after-3s
$matctl --store $t/store verify 2>&1 | tail -2
$matctl --store $t/store gc 2>&1 | tail -1; check after-gc
ls $t/store/*/ 2>/dev/null | head
