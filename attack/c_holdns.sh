#!/usr/bin/env bash
# A hold is judged from another pid namespace by its heartbeat against the
# snapshot's pending_expiry, but holds heartbeat only every 60 s: with
# pending_expiry below 60 s (a spec key any author sets) matctl rm in a
# container on the same host drops the row of a snapshot a daemon serves.
set -u
b=${MF_BUILD_ROOT:-$(cd "$(dirname "$0")/.." && pwd)/build/dev}; matctl=$b/tools/matctl
t=$(mktemp -d); mkdir -p $t/p/in $t/mnt; echo hi >$t/p/in/a.txt
cat >$t/p/up.yaml <<'YAML'
name: up
inputs: in/*.txt
pending_expiry: 2s
stages:
  - exec: [tr, a-z, A-Z]
YAML
$b/tools/matfs --store $t/store --pipelines $t/p -f $t/mnt >$t/log 2>&1 & pid=$!
trap 'fusermount3 -u $t/mnt; wait $pid; rm -rf $t' EXIT
for i in $(seq 50); do [ -L $t/mnt/up ] && break; sleep 0.2; done
fp=$(readlink $t/mnt/up); cat $t/mnt/up/shard-00000
$matctl --store $t/store rm "$fp" ; $matctl --store $t/store ls | grep -c ${fp:0:12} | sed 's/^/same ns, listed: /'
sleep 4
unshare -p -f --mount-proc $matctl --store $t/store rm "$fp"
$matctl --store $t/store ls | grep -c ${fp:0:12} | sed 's/^/other pid ns, listed: /'
$matctl --store $t/store cat "$fp" 0
