#!/bin/bash
# sid-chroot.sh -- a 3-node Slurm 26.05 test cluster inside a Debian sid chroot on this host.
#
# Usage (as root, no systemd needed):
#   tests/golden/sid-chroot.sh up                  build the chroot if needed, start munged, slurmctld, 3 slurmd
#   tests/golden/sid-chroot.sh run-scenario OUTDIR run record_scenario.sh inside the chroot, copy the files to OUTDIR
#   tests/golden/sid-chroot.sh exec CMD [ARG...]   run one command inside the chroot with SLURM_CONF set
#   tests/golden/sid-chroot.sh status              sinfo + squeue inside the chroot
#   tests/golden/sid-chroot.sh down                cancel jobs, stop every process of the chroot, unmount
#
# Environment:
#   SID_CHROOT         chroot directory (default /tmp/sid-chroot); kept after `down` for a quick rerun
#   MIRROR             Debian mirror URL; default: the URI of the host's apt source for its own codename
#   SID_SUITE          Debian suite to bootstrap (default sid)
#   CTLD_PORT          slurmctld port (default 7817)
#   SLURMD_BASE_PORT   slurmd ports are BASE+1..BASE+3 (default 7820 -> 7821-7823)
#
# Cluster: n1 = 2 x v100, n2 = 2 x p100, n3 = 4 x k80 (fake char devices), node Features = GPU type,
# one default partition "gpu". Ports 7817-7830 so that it does not clash with a 22.05 cluster on 6817-6830.
# Only processes whose /proc/PID/root is the chroot (or whose pid file lies inside it) are ever signalled.
set -euo pipefail

C="${SID_CHROOT:-/tmp/sid-chroot}"
SUITE="${SID_SUITE:-sid}"
CTLD_PORT="${CTLD_PORT:-7817}"
BASE="${SLURMD_BASE_PORT:-7820}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LAB=/lab                       # directory *inside* the chroot
PKGS=(slurm-wlm slurm-client munge python3 passwd procps)

log() { printf '[sid-chroot %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

# ---------------------------------------------------------------- mirror from the host's apt sources
host_mirror() {
  if [ -n "${MIRROR:-}" ]; then printf '%s\n' "$MIRROR"; return; fi
  local codename m=""
  codename="$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")"
  [ -n "$codename" ] || die "cannot read VERSION_CODENAME from /etc/os-release; set MIRROR"
  # deb822 *.sources: the first URI of an enabled "deb" stanza whose Suites contain the host codename
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    m="$(awk -v cn="$codename" '
      BEGIN { RS = ""; FS = "\n" }
      {
        uris = ""; suites = ""; types = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^[ \t]*#/) continue
          if (line ~ /^URIs:/)    { sub(/^URIs:[ \t]*/, "", line); uris = line }
          if (line ~ /^Suites:/)  { sub(/^Suites:[ \t]*/, "", line); suites = " " line " " }
          if (line ~ /^Types:/)   { sub(/^Types:[ \t]*/, "", line); types = " " line " " }
          if (line ~ /^Enabled:/) { sub(/^Enabled:[ \t]*/, "", line); enabled = tolower(line) }
        }
        if (enabled != "no" && types ~ / deb / && suites ~ (" " cn " ")) { split(uris, u, /[ \t]+/); print u[1]; exit }
      }' "$f")"
    [ -n "$m" ] && break
  done
  # one-line format: deb [options] URI SUITE COMPONENTS...
  if [ -z "$m" ]; then
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      m="$(awk -v cn="$codename" '
        $1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
          if ($(i + 1) == cn) { print $i; exit }
        }' "$f")"
      [ -n "$m" ] && break
    done
  fi
  [ -n "$m" ] || die "no apt source for suite $codename found on this host; set MIRROR"
  printf '%s\n' "$m"
}

# ---------------------------------------------------------------- helpers
in_chroot() {
  chroot "$C" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb SLURM_CONF=/etc/slurm/slurm.conf "$@"
}

chroot_root() { readlink -f "$C"; }

# true if PID exists and its root directory is the chroot
pid_in_chroot() {
  local pid="$1" r
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  r="$(readlink "/proc/$pid/root" 2>/dev/null)" || return 1
  [ "$r" = "$(chroot_root)" ]
}

# PIDs of all processes whose root is the chroot
chroot_pids() {
  local p root
  root="$(chroot_root)"
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null || true)" = "$root" ] && printf '%s\n' "${p#/proc/}"
  done
  return 0
}

wait_gone() {   # wait_gone SECONDS PID...
  local t="$1"; shift
  local end=$((SECONDS + t)) p alive
  while :; do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.2
  done
}

# stop the processes named by pid files inside the chroot (paths relative to the chroot),
# only those that really live in the chroot; SIGKILL after 15 s
kill_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    [ -f "$C$f" ] || continue
    pid="$(cat "$C$f")"
    if pid_in_chroot "$pid"; then
      log "stopping $f pid $pid"
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  if [ "${#pids[@]}" -gt 0 ] && ! wait_gone 15 "${pids[@]}"; then
    for pid in "${pids[@]}"; do pid_in_chroot "$pid" && { log "SIGKILL $pid"; kill -9 "$pid" 2>/dev/null || true; }; done
  fi
  for f in "$@"; do rm -f "$C$f"; done
}

is_mounted() { mountpoint -q "$1"; }

mount_fs() {
  is_mounted "$C/proc" || mount -t proc proc "$C/proc"
  if ! is_mounted "$C/sys"; then
    mount --rbind /sys "$C/sys"        # slurmd looks at /sys/fs/cgroup
    mount --make-rslave "$C/sys"
  fi
  is_mounted "$C/run" || mount -t tmpfs tmpfs "$C/run"
}

umount_fs() {
  if is_mounted "$C/sys"; then umount -R "$C/sys" || umount -R -l "$C/sys"; fi
  if is_mounted "$C/run"; then umount "$C/run" || umount -l "$C/run"; fi
  if is_mounted "$C/proc"; then umount "$C/proc" || umount -l "$C/proc"; fi
}

# ---------------------------------------------------------------- build
build() {
  local t0="$SECONDS" mirror
  if [ -f "$C/.hetsched-built" ]; then log "chroot $C already built"; return; fi
  mirror="$(host_mirror)"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  if [ ! -x "$C/bin/bash" ]; then
    log "debootstrap $SUITE into $C"
    mkdir -p "$C"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
      "$SUITE" "$C" "$mirror" >"$C.debootstrap.log" 2>&1 || { tail -20 "$C.debootstrap.log" >&2; die "debootstrap failed"; }
    log "debootstrap done after $((SECONDS - t0)) s"
  fi
  printf '#!/bin/sh\nexit 101\n' >"$C/usr/sbin/policy-rc.d"
  chmod +x "$C/usr/sbin/policy-rc.d"
  # a frozen/delayed mirror has Release files older than the clock
  printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' >"$C/etc/apt/apt.conf.d/99no-valid-until"
  cp /etc/resolv.conf "$C/etc/resolv.conf"
  mount_fs
  log "installing ${PKGS[*]}"
  in_chroot /bin/bash -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"' \
    _ "${PKGS[@]}" >"$C.apt.log" 2>&1 || { tail -20 "$C.apt.log" >&2; die "apt-get install in the chroot failed"; }
  touch "$C/.hetsched-built"
  log "build done after $((SECONDS - t0)) s: $(in_chroot slurmd -V)"
}

# ---------------------------------------------------------------- config
write_conf() {
  # fresh state: job ids start at 1 again
  rm -rf "$C$LAB/state" "$C$LAB/spool" "$C$LAB/log"
  mkdir -p "$C$LAB"/{state,log,run,fakedev,golden} "$C$LAB"/spool/{n1,n2,n3}
  local i
  for i in 0 1 2 3; do [ -e "$C$LAB/fakedev/nvidia$i" ] || mknod "$C$LAB/fakedev/nvidia$i" c 195 "$i"; done
  cat >"$C/etc/slurm/slurm.conf" <<CONF
# generated by sid-chroot.sh: 3 fake-GPU nodes on one host, one slurmd per node on its own port
ClusterName=sidlab
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
SlurmctldPort=$CTLD_PORT
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LAB/log/jobcomp.txt
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5
AuthInfo=cred_expire=10
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MessageTimeout=10
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
GresTypes=gpu
NodeName=n1 NodeHostname=n1 NodeAddr=127.0.0.1 Port=$((BASE + 1)) CPUs=8 RealMemory=4000 Gres=gpu:v100:2 Features=v100 State=UNKNOWN
NodeName=n2 NodeHostname=n2 NodeAddr=127.0.0.1 Port=$((BASE + 2)) CPUs=8 RealMemory=4000 Gres=gpu:p100:2 Features=p100 State=UNKNOWN
NodeName=n3 NodeHostname=n3 NodeAddr=127.0.0.1 Port=$((BASE + 3)) CPUs=8 RealMemory=4000 Gres=gpu:k80:4 Features=k80 State=UNKNOWN
PartitionName=gpu Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP
CONF
  cat >"$C/etc/slurm/gres.conf" <<CONF
AutoDetect=off
NodeName=n1 Name=gpu Type=v100 File=$LAB/fakedev/nvidia[0-1]
NodeName=n2 Name=gpu Type=p100 File=$LAB/fakedev/nvidia[0-1]
NodeName=n3 Name=gpu Type=k80  File=$LAB/fakedev/nvidia[0-3]
CONF
}

start_munge() {
  # munged resolves the host name at start; without an entry it waits for DNS (about 60 s)
  local h
  h="$(hostname -s)"
  grep -qw -- "$h" "$C/etc/hosts" 2>/dev/null || printf '127.0.1.1\t%s\n' "$h" >>"$C/etc/hosts"
  mkdir -p "$C/run/munge"
  in_chroot chown munge:munge /run/munge
  if in_chroot munge -n >/dev/null 2>&1; then return; fi
  [ -s "$C/etc/munge/munge.key" ] || in_chroot runuser -u munge -- mungekey -c
  in_chroot runuser -u munge -- /usr/sbin/munged
  local i
  for i in $(seq 1 50); do in_chroot munge -n >/dev/null 2>&1 && return; sleep 0.1; done
  die "munged did not start in the chroot"
}

# without a slurm.conf, scontrol tries a DNS SRV lookup (configless mode) that can hang for a minute
ctld_up() { [ -f "$C/etc/slurm/slurm.conf" ] && in_chroot scontrol ping 2>/dev/null | grep -q 'is UP'; }

up() {
  local t0="$SECONDS" n i
  build
  mount_fs
  start_munge
  if ctld_up; then log "slurmctld already running in the chroot"; in_chroot sinfo -N -o '%N %T %G %f'; return; fi
  write_conf
  # user for the --uid test (inside the chroot only)
  in_chroot id hetuser >/dev/null 2>&1 || in_chroot useradd -m -s /bin/bash hetuser
  in_chroot slurmctld -c -i
  for n in n1 n2 n3; do in_chroot slurmd -N "$n"; done
  for i in $(seq 1 150); do
    if [ "$(in_chroot sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$' || true)" = 3 ]; then
      log "cluster up after $((SECONDS - t0)) s ($(in_chroot sinfo --version))"
      in_chroot sinfo -N -o '%N %T %G %f'
      return 0
    fi
    sleep 0.2
  done
  tail -30 "$C$LAB/log/slurmctld.log" >&2 || true
  die "cluster did not become idle"
}

run_scenario() {
  local out="${1:?usage: sid-chroot.sh run-scenario OUTDIR}" t0="$SECONDS"
  ctld_up || die "cluster is not up (run: $0 up)"
  install -m 0755 "$HERE/record_scenario.sh" "$C$LAB/golden/record_scenario.sh"
  rm -rf "$C$LAB/golden/out" "$C$LAB/golden/jobs"
  mkdir -p "$C$LAB/golden/jobs"
  JOBDIR="$LAB/golden/jobs" in_chroot JOBDIR="$LAB/golden/jobs" /bin/bash "$LAB/golden/record_scenario.sh" "$LAB/golden/out"
  mkdir -p "$out"
  cp "$C$LAB/golden/out/"* "$out/"
  log "scenario recorded in $((SECONDS - t0)) s; files in $out:"
  ls -l "$out" >&2
}

down() {
  local p pids=()
  if [ -d "$C/proc" ] && is_mounted "$C/proc" && [ -S "$C/run/munge/munge.socket.2" ]; then
    if ctld_up; then
      local ids=()
      mapfile -t ids < <(in_chroot squeue -h -o %A 2>/dev/null || true)
      if [ "${#ids[@]}" -gt 0 ]; then
        log "cancelling jobs: ${ids[*]}"
        in_chroot scancel --full "${ids[@]}" 2>/dev/null || true
        for _ in $(seq 1 100); do [ -z "$(in_chroot squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
      fi
    fi
  fi
  kill_pidfiles "$LAB/run/slurmd-n1.pid" "$LAB/run/slurmd-n2.pid" "$LAB/run/slurmd-n3.pid" "$LAB/run/slurmctld.pid"
  kill_pidfiles /run/munge/munged.pid
  # leftovers (slurmstepd, job shells): only processes whose root is the chroot
  mapfile -t pids < <(chroot_pids)
  if [ "${#pids[@]}" -gt 0 ]; then
    log "terminating leftover chroot processes: ${pids[*]}"
    for p in "${pids[@]}"; do
      if pid_in_chroot "$p"; then kill "$p" 2>/dev/null || true; fi
    done
    if ! wait_gone 10 "${pids[@]}"; then
      for p in "${pids[@]}"; do
        if pid_in_chroot "$p"; then kill -9 "$p" 2>/dev/null || true; fi
      done
    fi
  fi
  umount_fs
  log "down (chroot kept in $C)"
}

status() {
  in_chroot sinfo -N -o '%N %T %G %f'
  in_chroot squeue -t all -o '%i %j %T %b %N %R'
}

case "${1:-}" in
  up) up ;;
  run-scenario) shift; run_scenario "$@" ;;
  exec) shift; in_chroot "$@" ;;
  status) status ;;
  down) down ;;
  mirror) host_mirror ;;
  *) echo "usage: $0 up | run-scenario OUTDIR | exec CMD... | status | down" >&2; exit 2 ;;
esac
