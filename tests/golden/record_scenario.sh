#!/bin/bash
# record_scenario.sh OUTDIR -- record the JSON a Slurm cluster prints for a fixed job scenario.
#
# Runs against whatever cluster SLURM_CONF points at. Expected cluster (same on every Slurm version):
#   n1 = 2 x v100, n2 = 2 x p100, n3 = 4 x k80, node Features = GPU type, one default partition,
#   MinJobAge large enough (>= 300) that finished jobs stay visible, no other jobs.
# Must run as root (AdminComment, StartTime updates). Works unchanged on Slurm 22.05 and 26.05.
#
# Writes into OUTDIR:
#   version.txt          sinfo --version
#   squeue.json          squeue --json
#   squeue_all.json      squeue --json --states=all (squeue --json alone omits finished jobs on 26.05)
#   sinfo.json           sinfo --json
#   scontrol_jobs.json   scontrol show job --json    (only where supported: not on 22.05)
#   scontrol_nodes.json  scontrol show nodes --json  (only where supported: not on 22.05)
#   errors.txt           argv, exit code, stderr (and stdout) of each error case
#   jobs.txt             letter -> job id map of the scenario (A..G)
# Job output goes to JOBDIR (default: a new directory under /tmp), never into OUTDIR.
#
# Environment: JOBDIR (job output folder), WAIT_TIMEOUT (seconds per wait, default 120).
#
# Jobs (all --requeue):
#   A running typed --gres=gpu:v100:2, comment with spaces/parentheses/semicolons, AdminComment set by root
#   B running untyped --gres=gpu:1 --constraint=p100
#   C pending + held --gres=gpu:2 --constraint=k80, then ReqNodeList=n3 ExcNodeList=n1
#   D running heterogeneous job: p100:1 on n2 + k80:2 on n3
#   E completed (--wrap true)
#   F requeued once and running again (restart count 1), untyped --gres=gpu:1 --constraint=k80
#   G cancelled while held
set -euo pipefail

usage() { echo "usage: $0 OUTDIR" >&2; exit 2; }
[ "$#" -eq 1 ] || usage
OUT="$1"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
TIMEOUT="${WAIT_TIMEOUT:-120}"
JOBDIR="${JOBDIR:-}"
if [ -z "$JOBDIR" ]; then JOBDIR="$(mktemp -d /tmp/hetsched-golden-jobs.XXXXXX)"; fi
mkdir -p "$JOBDIR"
JOBDIR="$(cd "$JOBDIR" && pwd)"
case "$JOBDIR/" in "$OUT"/*) echo "JOBDIR must not be inside OUTDIR" >&2; exit 2 ;; esac

CREATED=()     # every job id this script created (het job: leader id)
LAST_ID=""
ERRORS="$OUT/errors.txt"

log() { printf '[record %s] %s\n' "$(date +%T)" "$*" >&2; }

diag() {
  log "diagnostics:"
  squeue -t all -o '%i %j %T %r %b %N' >&2 || true
}

die() { log "ERROR: $*"; diag; exit 1; }

cleanup() {
  local rc=$? ids left i
  trap - EXIT
  if [ "${#CREATED[@]}" -gt 0 ]; then
    log "cancelling jobs created by this script: ${CREATED[*]}"
    for i in "${CREATED[@]}"; do scancel "$i" 2>/dev/null || true; done
    ids=" ${CREATED[*]} "
    for i in $(seq 1 $((TIMEOUT * 5))); do
      # active jobs (default squeue states); het components print as ID+N
      left=""
      while read -r j; do
        j="${j%%+*}"
        case "$ids" in *" $j "*) left="$left $j" ;; esac
      done < <(squeue -h -o %i 2>/dev/null || true)
      [ -z "$left" ] && break
      sleep 0.2
    done
    [ -n "$left" ] && log "WARNING: jobs still active after cleanup:$left"
  fi
  log "job output left in $JOBDIR"
  exit "$rc"
}
trap cleanup EXIT

# ------------------------------------------------------------------ helpers
# all states of job J (het job: one per component), space separated, sorted unique
states_of() { squeue -h -t all -j "$1" -o %T 2>/dev/null | sort -u | tr '\n' ' ' | sed 's/ $//'; }

restarts_of() {
  scontrol show job "$1" 2>/dev/null | grep -o 'Restarts=[0-9]*' | head -n 1 | cut -d= -f2
}

# wait_state J STATE: until every component of J is in STATE
wait_state() {
  local j="$1" want="$2" end=$((SECONDS + TIMEOUT)) s=""
  while [ "$SECONDS" -lt "$end" ]; do
    s="$(states_of "$j")"
    [ "$s" = "$want" ] && return 0
    sleep 0.5
  done
  die "job $j: waited ${TIMEOUT}s for $want, state is '$s'"
}

# wait_file_grep FILE PATTERN: until FILE contains PATTERN (the batch script really ran)
wait_file_grep() {
  local f="$1" pat="$2" end=$((SECONDS + TIMEOUT))
  while [ "$SECONDS" -lt "$end" ]; do
    grep -q -- "$pat" "$f" 2>/dev/null && return 0
    sleep 0.5
  done
  die "waited ${TIMEOUT}s for '$pat' in $f"
}

# submit ARG...: sbatch --parsable ARG...; sets LAST_ID and records it for cleanup
submit() {
  local out
  out="$(sbatch --parsable "$@")" || die "sbatch failed: $*"
  LAST_ID="${out%%;*}"
  [[ "$LAST_ID" =~ ^[0-9]+$ ]] || die "unexpected sbatch output: $out"
  CREATED+=("$LAST_ID")
  log "submitted $LAST_ID: $*"
}

# record_error LABEL ARGV...: run ARGV, append argv, rc, stderr, stdout to errors.txt (never fails)
record_error() {
  local label="$1"; shift
  local so se rc q
  so="$(mktemp)"; se="$(mktemp)"
  set +e
  "$@" >"$so" 2>"$se"
  rc=$?
  set -e
  printf -v q '%q ' "$@"
  {
    printf '=== case: %s\n' "$label"
    printf 'argv: %s\n' "${q% }"
    printf 'rc: %s\n' "$rc"
    printf -- '--- stderr ---\n'
    cat "$se"
    printf -- '--- stdout ---\n'
    cat "$so"
    printf -- '=== end\n\n'
  } >>"$ERRORS"
  # an error case that unexpectedly created a job: remember it for cleanup
  if [ "$1" = sbatch ] && [ "$rc" = 0 ]; then
    local id
    id="$(head -n 1 "$so")"; id="${id%%;*}"
    [[ "$id" =~ ^[0-9]+$ ]] && CREATED+=("$id")
  fi
  log "error case $label: rc=$rc $(head -c 200 "$se" | tr '\n' ' ')"
  rm -f "$so" "$se"
}

# ------------------------------------------------------------------ start
scontrol ping >/dev/null || die "no slurmctld reachable (SLURM_CONF=${SLURM_CONF:-unset})"
sinfo --version >"$OUT/version.txt"
log "Slurm: $(cat "$OUT/version.txt"), output to $OUT, job output to $JOBDIR"
rm -f "$OUT/squeue.json" "$OUT/squeue_all.json" "$OUT/sinfo.json" "$OUT/scontrol_jobs.json" "$OUT/scontrol_nodes.json" "$ERRORS" "$OUT/jobs.txt"
: >"$ERRORS"

SLEEPER="$JOBDIR/sleeper.sh"
cat >"$SLEEPER" <<'EOF'
#!/bin/bash
# long-running test job: runs until cancelled (or 1 h)
echo "start $(date +%s) node=${SLURMD_NODENAME:-?} restart=${SLURM_RESTART_COUNT:-0} job_gpus=${SLURM_JOB_GPUS:-}"
sleep 3600
EOF
chmod 0755 "$SLEEPER"
COMMON=(--requeue -D "$JOBDIR" -o "$JOBDIR/%x-%j.out")

# E: completed
submit "${COMMON[@]}" -J 'done' --wrap 'true'
E="$LAST_ID"
wait_state "$E" COMPLETED

# A: running, typed GRES, comment with spaces/parentheses/semicolons, AdminComment by root
submit "${COMMON[@]}" -J typed-v100 --gres=gpu:v100:2 \
  '--comment=hetsched:class=ResNet-50 (batch size 64);steps=20000;weight=1' "$SLEEPER"
A="$LAST_ID"
wait_state "$A" RUNNING
scontrol update "JobId=$A" 'AdminComment=hetsched r=1 v100x2@n1 share=v100:1.00 prio=1.0'

# B: running, untyped GRES + constraint
submit "${COMMON[@]}" -J untyped-p100 --gres=gpu:1 --constraint=p100 "$SLEEPER"
B="$LAST_ID"
wait_state "$B" RUNNING

# D: heterogeneous job, running (component 0 on n2, component 1 on n3)
submit "${COMMON[@]}" -J het -N1 --gres=gpu:p100:1 -w n2 : --requeue -J het -N1 --gres=gpu:k80:2 -w n3 "$SLEEPER"
D="$LAST_ID"
wait_state "$D" RUNNING

# F: requeued once, running again
submit "${COMMON[@]}" -J requeued --gres=gpu:1 --constraint=k80 "$SLEEPER"
F="$LAST_ID"
wait_state "$F" RUNNING
wait_file_grep "$JOBDIR/requeued-$F.out" 'restart=0'
scontrol requeue "$F"
wait_state "$F" PENDING
scontrol update "JobId=$F" StartTime=now
wait_state "$F" RUNNING
end=$((SECONDS + TIMEOUT))
until [ "$(restarts_of "$F")" = 1 ]; do
  [ "$SECONDS" -lt "$end" ] || die "job $F: restart count is '$(restarts_of "$F")', expected 1"
  sleep 0.5
done
wait_file_grep "$JOBDIR/requeued-$F.out" 'restart=1'

# C: pending and held, then required/excluded nodes
submit "${COMMON[@]}" -J held-k80 --hold --gres=gpu:2 --constraint=k80 "$SLEEPER"
C="$LAST_ID"
wait_state "$C" PENDING
scontrol update "JobId=$C" ReqNodeList=n3 ExcNodeList=n1

# G: cancelled while held
submit "${COMMON[@]}" -J cancelled --gres=gpu:1 --constraint=v100 --hold "$SLEEPER"
G="$LAST_ID"
wait_state "$G" PENDING
scancel "$G"
wait_state "$G" CANCELLED

printf 'A=%s\nB=%s\nC=%s\nD=%s\nE=%s\nF=%s\nG=%s\n' "$A" "$B" "$C" "$D" "$E" "$F" "$G" >"$OUT/jobs.txt"

# ------------------------------------------------------------------ check the scenario, then snapshot
# (taken before the error cases: on 26.05 a rejected sbatch leaves a FAILED job record behind)
[ "$(states_of "$A")" = RUNNING ] || die "A not RUNNING"
[ "$(states_of "$B")" = RUNNING ] || die "B not RUNNING"
[ "$(states_of "$C")" = PENDING ] || die "C not PENDING"
[ "$(states_of "$D")" = RUNNING ] || die "D not RUNNING"
[ "$(states_of "$E")" = COMPLETED ] || die "E not COMPLETED"
[ "$(states_of "$F")" = RUNNING ] || die "F not RUNNING"
[ "$(states_of "$G")" = CANCELLED ] || die "G not CANCELLED"

# let the backfill pass clear transient node flags (26.05 marks nodes PLANNED for a pending job
# it just scheduled, e.g. the het job; 22.05 has no such flag)
end=$((SECONDS + TIMEOUT))
while scontrol show nodes 2>/dev/null | grep -q 'State=[^ ]*PLANNED'; do
  [ "$SECONDS" -lt "$end" ] || { log "WARNING: nodes still PLANNED, snapshot taken anyway"; break; }
  sleep 0.5
done

squeue --json >"$OUT/squeue.json"
sinfo --json >"$OUT/sinfo.json"
tmp="$(mktemp)"
# plain `squeue --json` leaves out finished jobs (E, G) on 26.05; this one has every state
if squeue --json --states=all >"$tmp" 2>/dev/null; then
  mv "$tmp" "$OUT/squeue_all.json"
else
  log "squeue --json --states=all failed; squeue_all.json skipped"
fi
tmp="$(mktemp)"
if scontrol show job --json >"$tmp" 2>/dev/null; then
  mv "$tmp" "$OUT/scontrol_jobs.json"
  scontrol show nodes --json >"$OUT/scontrol_nodes.json"
else
  log "scontrol show job --json not supported by this Slurm version; skipped"
  rm -f "$tmp"
fi
# ------------------------------------------------------------------ error cases
record_error update-unknown-job      scontrol update JobId=999999 Priority=5
record_error squeue-json-unknown-job squeue --json -j 999999
record_error scancel-unknown-job     scancel 999999
record_error sbatch-unknown-gpu-type sbatch --parsable --gres=gpu:nosuchtype:1 --wrap true
record_error sbatch-too-many-gpus    sbatch --parsable --gres=gpu:9 --wrap true
record_error requeue-pending-job     scontrol requeue "$C"
record_error update-features-running scontrol update "JobId=$A" Features=k80
# not an error case: which job records exist afterwards (26.05 keeps FAILED records of rejected sbatch calls)
record_error info-jobs-after-error-cases squeue -h -t all -o '%i|%j|%T|%r|%b'

chmod 0644 "$OUT"/*
log "recorded: $(cd "$OUT" && printf '%s ' *)"
