# step CMD...: runs CMD, then prints its wall time and the CPU time (user + system) of the
# child processes that ended during it, and keeps both for `step_summary` (CI has a time
# budget). A job started beside the steps (.ci/run's beside_start) is a child too: its CPU time
# is counted in the step during which it ends, not in beside_wait.
# Sourced by .ci/run and scripts/test-windows.sh.
STEP_TIMES=""
STEP_TMP=$(mktemp)
# Sets STEP_CPU_MS to the CPU milliseconds of this shell's ended children so far: bash's
# `times` (second line, "XmY.YYYs XmY.YYYs"), read without a subshell, which would have no
# children yet.
step_cpu() {
  local u s
  times >"$STEP_TMP"
  { read -r _ _; read -r u s; } <"$STEP_TMP"
  STEP_CPU_MS=$(( $(step_ms "$u") + $(step_ms "$s") ))
}
# "XmY.YYYs" as milliseconds.
step_ms() {
  local m=${1%%m*} sec=${1#*m}
  sec=${sec%s}
  echo $(( m * 60000 + 10#${sec%.*} * 1000 + 10#${sec#*.} ))
}
step() {
  local t0=$SECONDS c0 cpu
  step_cpu
  c0=$STEP_CPU_MS
  "$@"
  step_cpu
  cpu=$(( (STEP_CPU_MS - c0 + 500) / 1000 ))
  STEP_TIMES="$STEP_TIMES$(printf '%5ds %5ds  %s' $((SECONDS - t0)) "$cpu" "$*")"$'\n'
  echo "ci step: $((SECONDS - t0)) s wall, $cpu s CPU: $*"
}
# Every step's wall and CPU seconds, and the total wall time, headed "$1 steps".
step_summary() {
  printf "\n%s steps (wall, CPU):\n%s%5ds         total\n" "$1" "$STEP_TIMES" "$SECONDS"
  rm -f "$STEP_TMP"
}
