#!/usr/bin/env bash
# Records what Slurm's commands answer when slurmctld cannot be reached, in the block format of
# errors.txt (see README.md). The cluster SLURM_CONF points at stays up: the commands run with
# a copy of its slurm.conf whose SlurmctldPort nobody listens on.
# Usage: SLURM_CONF=... tests/golden/record_unreachable.sh OUTFILE [PORT]
set -euo pipefail
out=$1
port=${2:-6999}
conf_dir=$(mktemp -d)
trap 'rm -rf "$conf_dir"' EXIT
sed "s/^SlurmctldPort=.*/SlurmctldPort=$port/" "$SLURM_CONF" > "$conf_dir/slurm.conf"
: > "$out"
record() {
  local label=$1; shift
  local rc=0
  SLURM_CONF="$conf_dir/slurm.conf" "$@" > "$conf_dir/stdout" 2> "$conf_dir/stderr" || rc=$?
  {
    echo "=== case: $label"
    printf 'argv:'; printf ' %q' "$@"; echo
    echo "rc: $rc"
    echo "--- stderr ---"; cat "$conf_dir/stderr"
    echo "--- stdout ---"; cat "$conf_dir/stdout"
    echo "=== end"; echo
  } >> "$out"
}
record squeue-json-unreachable squeue --json --states=all
record sinfo-json-unreachable sinfo --json
record requeuehold-unreachable scontrol requeuehold 5
record release-unreachable scontrol release 5
record hold-unreachable scontrol hold 5
record update-unreachable scontrol update JobId=5 Features=v100
record signal-unreachable scancel --verbose --batch --signal=USR2 5
