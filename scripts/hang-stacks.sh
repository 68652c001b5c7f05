#!/usr/bin/env bash
# Runs a command in a process group of its own; if it is still running after SECONDS, writes,
# for it and every process below it, what each thread waits in (the kernel's view: state, wait
# channel, kernel stack), the executable mappings, then every thread's stack (gdb, else
# cuda-gdb; at most 90 s each) to OUT_DIR/stacks.txt, and stops the whole group. Its output
# goes to OUT_DIR/output.txt. For a hang seen on a machine where no debugger can be attached
# by hand (the GPU machine).
#   scripts/hang-stacks.sh OUT_DIR SECONDS COMMAND [ARG]...
# Exit status: the command's when it ended in time, 124 when it had to be stopped. Never waits
# more than 20 s for the stopped group to go (a process stuck in a driver may take longer).
set -u
OUT_DIR=$1; SECS=$2; shift 2
mkdir -p "$OUT_DIR"
setsid "$@" > "$OUT_DIR/output.txt" 2>&1 &
pid=$!
for _ in $(seq 1 "$SECS"); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 1
done
kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
# The command and every process below it, parents first.
procs=() queue=("$pid")
while [ ${#queue[@]} -gt 0 ]; do
  p=${queue[0]}; queue=("${queue[@]:1}"); procs+=("$p")
  mapfile -t kids < <(pgrep -P "$p")
  queue+=("${kids[@]}")
done
dbg=$(command -v gdb || command -v cuda-gdb || true)
for p in "${procs[@]}"; do
  echo "== still running after ${SECS}s: pid $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null))"
  for t in /proc/"$p"/task/*; do
    echo "-- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) $(grep '^State' "$t/status" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
    cat "$t/stack" 2>/dev/null; echo
  done
  echo "-- executable mappings (to place the frames a debugger cannot name)"
  grep -E 'r-xp' "/proc/$p/maps" 2>/dev/null
  if [ -n "$dbg" ]; then
    timeout -s KILL 90 "$dbg" -p "$p" -batch -ex "set pagination off" -ex "thread apply all bt" 2>&1
  fi
done > "$OUT_DIR/stacks.txt" 2>&1
kill -9 -- "-$pid" 2>/dev/null
for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
exit 124
