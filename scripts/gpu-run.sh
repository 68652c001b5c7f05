#!/usr/bin/env bash
# Runs several GPU scripts in one device call and packs everything they write into one archive
# per script under $OUT (the device tool returns at most 8 files). Each script gets its own
# OUT folder; its last lines (the tables) are printed again at the end.
# Usage: scripts/gpu-run.sh scripts/gpu-a.sh [args] -- scripts/gpu-b.sh [args] ...
set -uo pipefail
cd "$(dirname "$0")/.."
final=${OUT:?OUT must be set (the device tool sets it)}
work=$(mktemp -d)
status=0
run_one() {
  local name; name=$(basename "$1" .sh)
  mkdir -p "$work/$name"
  echo "=== $* ($(date -u +%T))"
  OUT="$work/$name" timeout "${GPU_SCRIPT_TIMEOUT:-540}" bash "$@" 2>&1 | tee "$work/$name/console.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name exit $rc ($(date -u +%T))"
  [ "$rc" = 0 ] || status=1
  tar -czf "$final/$name.tar.gz" -C "$work" "$name"
}
args=()
for a in "$@" --; do
  if [ "$a" = "--" ]; then
    [ ${#args[@]} -gt 0 ] && run_one "${args[@]}"
    args=()
  else
    args+=("$a")
  fi
done
echo "=== summaries"
for f in "$work"/*/console.log; do echo "--- $(basename "$(dirname "$f")")"; tail -n 25 "$f"; done
exit $status
