#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (munge + slurmctld + slurmd), for tests and local trials.
#
#   bash scripts/slurm_cluster.sh start    # install (apt, as root) if missing, start what is not running; idempotent
#   bash scripts/slurm_cluster.sh stop     # stop the daemons this script started
#   bash scripts/slurm_cluster.sh status   # exit 0 when the node answers as idle/mixed/allocated
#
# State, spool, pid and log files live under $NG_SLURM_STATE_DIR (default /tmp/nemo_gym_slurm). `start` prints
# `started` when it started slurmctld itself and `already running` when a controller was up before, so callers
# know whether `stop` is theirs to call. A controller this script did not start is never configured or stopped.
set -euo pipefail

STATE_DIR="${NG_SLURM_STATE_DIR:-/tmp/nemo_gym_slurm}"
CONF=/etc/slurm/slurm.conf
NODE="$(hostname -s)"

log() { echo "[slurm_cluster] $*" >&2; }
die() { log "error: $*"; exit 1; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_ready() {
  local state
  state="$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n1)" || return 1
  [[ "$state" =~ ^(idle|mixed|allocated|completing) ]]
}

install_slurm() {
  command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  [[ "$(id -u)" == 0 ]] || die "Slurm is not installed and installing it needs root"
  log "installing slurm-wlm and munge (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi
  # munged refuses to start without its socket directory, and it must belong to the munge user.
  mkdir -p /run/munge
  chown munge:munge /run/munge
  chmod 0755 /run/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  log "starting munged"
  /usr/sbin/munged --force
  touch "$STATE_DIR/munge.ours"
}

write_conf() {
  mkdir -p /etc/slurm "$STATE_DIR/state" "$STATE_DIR/spool"
  cat >"$CONF" <<EOF
# Written by nemo_gym scripts/slurm_cluster.sh: a one-node test cluster.
ClusterName=nemogym
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# A requeued job waits cred_expire seconds before it may start again (default 120): keep tests quick.
AuthInfo=cred_expire=15
# Rescan pending jobs (requeued ones, released dependencies) every few seconds instead of every minute.
SchedulerParameters=sched_interval=5,bf_interval=5
StateSaveLocation=${STATE_DIR}/state
SlurmdSpoolDir=${STATE_DIR}/spool
SlurmctldPidFile=${STATE_DIR}/slurmctld.pid
SlurmdPidFile=${STATE_DIR}/slurmd.pid
SlurmctldLogFile=${STATE_DIR}/slurmctld.log
SlurmdLogFile=${STATE_DIR}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
# Seconds between SIGTERM and SIGKILL when a job is cancelled: time for collectors to flush.
KillWait=30
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=20000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  install_slurm
  mkdir -p "$STATE_DIR"
  start_munge
  if pgrep -x slurmctld >/dev/null && ! pid_alive "$STATE_DIR/slurmctld.pid"; then
    log "a slurmctld not started by this script is running; leaving it alone"
    echo "already running"
    return 0
  fi
  local outcome="already running"
  if ! pid_alive "$STATE_DIR/slurmctld.pid"; then
    write_conf
    log "starting slurmctld (state in $STATE_DIR)"
    # -c: start from a clean slate; jobs from an earlier test cluster must not come back.
    /usr/sbin/slurmctld -c
    outcome="started"
  fi
  if ! pid_alive "$STATE_DIR/slurmd.pid"; then
    log "starting slurmd"
    /usr/sbin/slurmd
  fi
  for _ in $(seq 60); do
    if node_ready; then echo "$outcome"; return 0; fi
    # A node left down/drained by an earlier unclean stop comes back with an explicit resume.
    if sinfo -h -n "$NODE" -o %T 2>/dev/null | grep -qE '^(down|drain)'; then
      scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
    fi
    sleep 1
  done
  die "node $NODE not idle after 60 s; see $STATE_DIR/slurmctld.log and $STATE_DIR/slurmd.log"
}

stop_pidfile() {
  local name="$1" file="$2"
  pid_alive "$file" || return 0
  log "stopping $name"
  local pid
  pid="$(cat "$file")"
  kill -TERM "$pid"
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  stop_pidfile slurmd "$STATE_DIR/slurmd.pid"
  stop_pidfile slurmctld "$STATE_DIR/slurmctld.pid"
  if [[ -f "$STATE_DIR/munge.ours" ]]; then
    stop_pidfile munged /run/munge/munged.pid
    rm -f "$STATE_DIR/munge.ours"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) node_ready ;;
  *) die "usage: $0 start|stop|status" ;;
esac
