#!/usr/bin/env bash
# Runs a command; if it is still running after SECONDS, writes what each of its threads waits
# in (the kernel's view: state, wait channel, kernel stack), then every thread's stack (gdb,
# else cuda-gdb; at most 90 s) to OUT_DIR/stacks.txt, and stops it. Its output goes to
# OUT_DIR/output.txt. For a hang seen on a machine where no debugger can be attached by hand
# (the GPU machine).
#   scripts/hang-stacks.sh OUT_DIR SECONDS COMMAND [ARG]...
# Exit status: the command's when it ended in time, 124 when it had to be stopped. Never waits
# more than 20 s for the stopped process to go (one stuck in a driver may take longer).
set -u
OUT_DIR=$1; SECS=$2; shift 2
mkdir -p "$OUT_DIR"
"$@" > "$OUT_DIR/output.txt" 2>&1 &
pid=$!
for _ in $(seq 1 "$SECS"); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 1
done
# The process to read: the command's deepest child (env and timeout exec or fork it).
target=$pid
while child=$(pgrep -P "$target" | head -1) && [ -n "$child" ]; do target=$child; done
{
  echo "still running after ${SECS}s: pid $target ($(tr '\0' ' ' < "/proc/$target/cmdline" 2>/dev/null))"
  for t in /proc/"$target"/task/*; do
    echo "-- thread ${t##*/} $(cat "$t/comm" 2>/dev/null) $(grep '^State' "$t/status" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
    cat "$t/stack" 2>/dev/null; echo
  done
  echo "-- mappings (to place the frames gdb cannot name)"
  grep -E 'r-xp' "/proc/$target/maps" 2>/dev/null
  dbg=$(command -v gdb || command -v cuda-gdb || true)
  if [ -n "$dbg" ]; then
    timeout -s KILL 90 "$dbg" -p "$target" -batch -ex "set pagination off" -ex "thread apply all bt" 2>&1
  fi
} > "$OUT_DIR/stacks.txt" 2>&1
kill -9 "$target" "$pid" 2>/dev/null
for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
exit 124
