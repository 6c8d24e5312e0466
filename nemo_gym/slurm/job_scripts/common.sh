# Shell functions shared by the collect and aggregate job scripts; ng_slurm_submit inlines this file into each
# rendered script so a submitted job never depends on the checkout it came from.

ng_log() { echo "[ng_slurm $(date +%H:%M:%S)] $*"; }

ng_free_port() {
  "$NG_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ng_stop PID SIGNAL GRACE_S: signal one child, give it GRACE_S seconds, then kill it.
ng_stop() {
  local pid="$1" sig="$2" grace="$3" i
  kill -s "$sig" "$pid" 2>/dev/null || return 0
  for ((i = 0; i < grace * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# On SIGTERM (scancel, preemption, or `--signal=B:TERM@N` before the time limit) stop the worker (collector or
# aggregator) first: every rollout the collector finished is already one flushed line, so the shard resumes exactly
# where it stopped. Then stop ng_run, which stops its servers (vLLM included).
ng_on_term() {
  trap '' TERM INT
  ng_log "$1 received: stopping the worker and the servers"
  if [[ -n "${NG_WORKER_PID:-}" ]]; then ng_stop "$NG_WORKER_PID" TERM 20; fi
  if [[ -n "${NG_RUN_PID:-}" ]]; then ng_stop "$NG_RUN_PID" TERM 30; fi
  ng_log "stopped cleanly"
  exit 143
}
trap 'ng_on_term SIGTERM' TERM
trap 'ng_on_term SIGINT' INT

# ng_start_servers LOG_DIR ARGS...: start `ng_run ARGS` on a free head port in the background and wait until its head
# server says every server is healthy (ng_status exits 0). Sets NG_RUN_PID and NG_HEAD_PORT. Free ports are picked before they are bound, so on a node
# shared with other jobs one can be taken in between: that start is retried on new ports.
ng_start_servers() {
  local log_dir="$1" attempt
  shift
  mkdir -p "$log_dir"
  for attempt in 1 2 3; do
    ng_try_start_servers "$log_dir" "$@" && return 0
    grep -qrsi "already in use" "$log_dir" || break
    ng_log "a port was taken while ng_run started (attempt $attempt); retrying on new ports"
  done
  ng_log "ng_run exited during start-up; last lines of $log_dir/ng_run.log:"
  tail -n 30 "$log_dir/ng_run.log"
  exit 1
}

ng_try_start_servers() {
  local log_dir="$1" started=$SECONDS
  shift
  NG_HEAD_PORT="$(ng_free_port)"
  ng_log "starting servers: ng_run on head port $NG_HEAD_PORT (logs in $log_dir)"
  echo "[ng_slurm] ng_run on head port $NG_HEAD_PORT" >>"$log_dir/ng_run.log"
  ng_run "$@" "+head_server.port=$NG_HEAD_PORT" "+log_dir=$log_dir/servers" >>"$log_dir/ng_run.log" 2>&1 &
  NG_RUN_PID=$!
  until ng_status "+head_server.port=$NG_HEAD_PORT" >/dev/null 2>&1; do
    if ! kill -0 "$NG_RUN_PID" 2>/dev/null; then
      wait "$NG_RUN_PID"
      NG_RUN_PID=
      return 1
    fi
    if ((SECONDS - started >= NG_STARTUP_TIMEOUT_S)); then
      ng_log "servers not healthy after ${NG_STARTUP_TIMEOUT_S} s; see $log_dir"
      ng_stop "$NG_RUN_PID" TERM 30
      exit 1
    fi
    # Sleep in the background so a SIGTERM is handled at once, not after the sleep.
    sleep 1 &
    wait $!
  done
  # Wall-clock seconds ($SECONDS), not polls: under load one ng_status poll can take seconds itself.
  ng_log "servers healthy after $((SECONDS - started)) s"
}

ng_stop_servers() {
  ng_stop "$NG_RUN_PID" TERM 30
  NG_RUN_PID=
}
