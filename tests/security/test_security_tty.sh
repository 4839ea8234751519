#!/usr/bin/env bash
# test_security_tty.sh - a user's stage gets neither root's terminal nor
# root's session keyring. A root daemon run in the foreground on a pty
# (`script`, as an admin runs `matfs -f`), whose session keyring holds a
# key, runs a user's stage that looks for both: it must be the leader of a
# session of its own with no controlling terminal (so /dev/tty fails with
# ENXIO and TIOCSTI has nothing to type into), its stdin, stdout and
# stderr must be pipes, and the key must be out of its reach. `matctl
# warm` run by root on a pty, the same.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
for cmd in script keyctl; do
  command -v "$cmd" >/dev/null || skip "no $cmd"
done
add_user

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c "echo x >'$u/pipelines/in/a.txt'"
as_user tee "$u/pipelines/probe.py" >/dev/null <<'PY'
import errno, fcntl, os, stat, subprocess, sys, termios
out = []
out.append("session_leader=%d" % (os.getsid(0) == os.getpid()))
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
out.append("tty_nr=%s" % fields[4])
try:
    fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"#")
        out.append("devtty=typed")
    except OSError as e:
        out.append("devtty=open,%s" % errno.errorcode[e.errno])
except OSError as e:
    out.append("devtty=%s" % errno.errorcode[e.errno])
for fd in (0, 1, 2):
    mode = os.fstat(fd).st_mode
    out.append("fd%d=%s" % (fd, "fifo" if stat.S_ISFIFO(mode) else oct(mode)))
key = subprocess.run(["/usr/bin/keyctl", "request", "user", "mfsecret"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
out.append("key=%s" % ("found" if key.returncode == 0 else "none"))
sys.stdin.read()
sys.stdout.write("\n".join(out) + "\n")
PY
as_user tee "$u/pipelines/tty.yaml" >/dev/null <<'YAML'
name: tty
inputs: in/*.txt
stages:
  - exec: [python3, probe.py]
YAML

want='session_leader=1
tty_nr=0
devtty=ENXIO
fd0=fifo
fd1=fifo
fd2=fifo
key=none'

# check_probe FILE WHAT: FILE is what the stage found
check_probe() {
  [ "$(cat "$1")" = "$want" ] ||
    fail "$2: the stage found: $(tr '\n' ' ' <"$1") (want: $(echo $want))"
}

# the key is there for root's own processes in that session: the probe
# would find it
keyctl session - sh -c 'keyctl add user mfsecret TOPSECRET @s >/dev/null &&
  keyctl request user mfsecret >/dev/null' 2>/dev/null ||
  fail "keyctl: a session key cannot be added here"

# run_on_pty COMMAND: runs COMMAND (a shell line) as root on a new pty, in
# a session keyring that holds user:mfsecret; in the background, sets $spid
run_on_pty() {
  script -qec "keyctl session - sh -c 'keyctl add user mfsecret TOPSECRET @s \
    >/dev/null && exec $1'" /dev/null </dev/null >>"$tmp/pty.out" 2>&1 &
  spid=$!
  daemons+=("$spid")
}

mnt=$tmp/mnt
mkdir -p "$mnt"
mounts+=("$mnt")
run_on_pty "$matfs --store $tmp/store --pipelines $u/pipelines -f \
  -o allow_other $mnt >>$log 2>&1"
wait_for 20 is_mounted "$mnt" || fail "matfs did not mount $mnt on a pty"
wait_for 20 has_name "$mnt" tty || fail "tty is not registered"
as_user cat "$mnt/tty/shard-00000" >"$tmp/probe" || fail "read failed"
check_probe "$tmp/probe" "under a root daemon on a pty"
pass "a stage of a daemon on a pty has no terminal and no session key"
fusermount3 -u "$mnt" || fail "fusermount3 -u $mnt"
wait_for 60 pid_gone "$spid" || fail "matfs still runs 60 s after unmount"
! grep -q '#' "$tmp/pty.out" || fail "something was typed into the pty"

# matctl warm as root on a pty, on the user's spec, then cat off the pty
run_on_pty "$tmp/bin/matctl --store $tmp/store2 warm $u/pipelines/tty.yaml \
  >>$tmp/warm.out 2>&1"
wait_for 60 pid_gone "$spid" || fail "matctl warm still runs after 60 s"
wait "$spid" || fail "matctl warm failed: $(cat "$tmp/warm.out")"
"$tmp/bin/matctl" --store "$tmp/store2" cat \
  "$("$tmp/bin/matctl" fingerprint "$u/pipelines/tty.yaml")" 0 \
  >"$tmp/probe2" || fail "matctl cat failed"
check_probe "$tmp/probe2" "under matctl warm on a pty"
pass "a stage of matctl warm on a pty has no terminal and no session key"
