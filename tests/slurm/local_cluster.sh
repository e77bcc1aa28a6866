#!/usr/bin/env bash
# A real, private, one-node SLURM cluster on this machine, for the tests.
#
#   tests/slurm/local_cluster.sh start DIR   install slurm + munge if missing, start munged,
#                                            slurmctld and slurmd, wait for the node to be idle
#   tests/slurm/local_cluster.sh stop DIR    cancel its jobs, stop its daemons, remove nothing else
#   tests/slurm/local_cluster.sh env DIR     print the exports that point SLURM's clients at it
#
# Everything lives under DIR (keep it short: munge's socket path must fit in 108 bytes):
# slurm.conf, the munge key and socket, state, spool and logs. The daemons run as root,
# directly (no systemd), on free TCP ports, so the cluster touches neither /etc/slurm nor
# /etc/munge nor a system munged, and two clusters in two DIRs can run side by side.
# Clients reach it through SLURM_CONF=DIR/slurm.conf (`env` prints it).
#
# The node is called after `hostname -s`, claims DPINFER_SLURM_CPUS CPUs (default 8,
# whatever the machine has: config_overrides) so that a few small jobs run at once, and
# has no cgroups (proctrack/linuxproc, task/none). `start` is idempotent; when the
# cluster cannot start it exits non-zero with the tail of the daemons' logs.
set -euo pipefail

cmd="${1:-}"
dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop|env|status DIR" >&2
  exit 2
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
conf="$dir/slurm.conf"
sock="$dir/munge/munge.socket"
cpus="${DPINFER_SLURM_CPUS:-8}"
gpus="${DPINFER_SLURM_GPUS:-8}"
start_timeout="${DPINFER_SLURM_START_TIMEOUT:-60}"
node="$(hostname -s)"
# Every daemon (and so every slurmstepd) carries this mark, so that `stop` finds
# exactly the processes this cluster started.
mark="DPINFER_LOCAL_SLURM=$dir"

say() { printf 'local_cluster: %s\n' "$*" >&2; }

export SLURM_CONF="$conf"

logs_tail() {
  local f
  for f in "$dir"/log/munged.log "$dir"/log/slurmctld.log "$dir"/log/slurmd.log "$dir"/log/*.out; do
    [ -s "$f" ] || continue
    echo "----- tail of $f" >&2
    tail -n 25 "$f" >&2
  done
}

starting=0
fail() {
  say "ERROR: $*"
  logs_tail
  # A cluster that failed to start leaves nothing running.
  [ "$starting" = 1 ] && stop_daemons quiet
  exit 1
}

alive() {  # pid file
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_if_missing() {
  local need=() p
  for p in slurmd slurmctld slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  say "installing ${need[*]} (apt-get)"
  [ "$(id -u)" -eq 0 ] || fail "installing ${need[*]} needs root"
  # The packages' init scripts must not start system daemons: this cluster runs its own.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  local ok=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >"$dir/apt.log" 2>&1 ||
    { apt-get update -qq >>"$dir/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$dir/apt.log" 2>&1; } ||
    ok=1
  [ "$made_policy" = 1 ] && rm -f "$policy"
  [ "$ok" = 0 ] || { tail -n 20 "$dir/apt.log" >&2; fail "apt-get install ${need[*]} failed"; }
}

free_ports() {  # prints two TCP ports that no socket on this machine is bound to
  local used hex p ports=()
  # Local ports of every TCP socket (any state), from the kernel's tables, in decimal.
  used=" $(for hex in $(awk 'NR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    echo -n "$((16#$hex)) "
  done)"
  while [ ${#ports[@]} -lt 2 ]; do
    # Below the ephemeral range (32768-60999), so no outgoing connection takes it meanwhile.
    p=$((20000 + RANDOM % 12000))
    case "$used ${ports[*]-} " in *" $p "*) continue ;; esac
    ports+=("$p")
  done
  echo "${ports[@]}"
}

write_conf() {
  local ctld_port="$1" slurmd_port="$2"
  # Fake GPUs: character devices that are /dev/null (Slurm wants devices in File=).
  local i gres_line="" gres_types=""
  if [ "$gpus" -gt 0 ]; then
    mkdir -p "$dir/dev"
    for ((i = 0; i < gpus; i++)); do
      [ -c "$dir/dev/gpu$i" ] || mknod "$dir/dev/gpu$i" c 1 3 2>/dev/null || break
    done
    if [ -c "$dir/dev/gpu$((gpus - 1))" ]; then
      echo "NodeName=$node Name=gpu File=$dir/dev/gpu[0-$((gpus - 1))]" >"$dir/gres.conf"
      gres_types="GresTypes=gpu"
      gres_line=" Gres=gpu:$gpus"
    else
      say "WARNING: cannot make fake GPU devices (mknod); the cluster has no GPUs"
      gpus=0
    fi
  fi
  echo "$gpus" >"$dir/gpus"
  : >>"$dir/gres.conf"
  cat >"$conf" <<EOF
# Written by tests/slurm/local_cluster.sh: a private one-node cluster for dpinfer's tests.
ClusterName=dpinfertest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (default 120 s).
AuthInfo=socket=$sock,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2,sched_min_interval=100000
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MaxArraySize=1001
MinJobAge=600
KillWait=30
InactiveLimit=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=30
Waittime=0
# Fake GPUs (gres.conf), so that the examples' --gpus-per-task=1 schedules here; no CUDA
# device is visible to the jobs, and \`dpinfer generate --device auto\` runs on the CPU.
$gres_types
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000$gres_line State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

print_env() {
  echo "export SLURM_CONF='$conf'"
}

node_idle() {
  local state
  state="$(sinfo -h -n "$node" -o '%T' 2>/dev/null | head -n1)" || return 1
  case "$state" in idle | mixed | allocated) return 0 ;; *) return 1 ;; esac
}

start() {
  if alive "$dir/munged.pid" && alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid" && [ -s "$conf" ] && node_idle; then
    say "already running in $dir"
    print_env
    return 0
  fi
  stop_daemons quiet
  starting=1
  install_if_missing
  for b in munged slurmctld slurmd sinfo sbatch srun scontrol; do
    command -v "$b" >/dev/null || fail "$b is not installed"
  done
  rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
  chmod 700 "$dir/munge"
  [ ${#sock} -lt 100 ] || fail "DIR is too long for munge's socket path ($sock)"

  # munge: a fresh private key and socket.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  env "$mark" munged --force --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --log-file="$dir/log/munged.log" >"$dir/log/munged.out" 2>&1 ||
    fail "munged did not start"
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || fail "munged made no socket $sock"
  if command -v munge >/dev/null && command -v unmunge >/dev/null; then
    munge -n -S "$sock" | unmunge -S "$sock" >/dev/null 2>&1 || fail "munge cannot encode and decode a credential"
  fi

  read -r ctld_port slurmd_port < <(free_ports)
  write_conf "$ctld_port" "$slurmd_port"
  # -i: ignore any old state. Both daemonize; their logs go to $dir/log.
  env "$mark" SLURM_CONF="$conf" slurmctld -f "$conf" -i >"$dir/log/slurmctld.out" 2>&1 || fail "slurmctld did not start"
  env "$mark" SLURM_CONF="$conf" slurmd -f "$conf" -N "$node" >"$dir/log/slurmd.out" 2>&1 || fail "slurmd did not start"

  local deadline=$((SECONDS + start_timeout))
  until node_idle; do
    if [ $SECONDS -ge $deadline ]; then
      sinfo -N -l >&2 || true
      fail "node $node did not become idle within ${start_timeout}s"
    fi
    alive "$dir/slurmctld.pid" || { sleep 0.5; alive "$dir/slurmctld.pid" || fail "slurmctld died"; }
    alive "$dir/slurmd.pid" || { sleep 0.5; alive "$dir/slurmd.pid" || fail "slurmd died"; }
    sleep 0.5
  done
  starting=0
  say "cluster up in $dir: node $node idle, $cpus CPUs, $gpus fake GPUs, slurmctld port $ctld_port"
  print_env
}

# Pids of the processes whose environment carries this cluster's mark.
marked_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "$mark" && echo "${p#/proc/}"
  done
  return 0
}

stop_daemons() {
  local quiet="${1:-}"
  # Jobs first, so that no slurmstepd outlives its slurmd.
  if [ -s "$conf" ] && alive "$dir/slurmctld.pid"; then
    scancel --quiet --full --state=RUNNING "--user=$(id -un)" >/dev/null 2>&1 || true
    scancel --quiet "--user=$(id -un)" >/dev/null 2>&1 || true
    for _ in $(seq 20); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  local f pid
  for f in slurmd slurmctld munged; do
    if alive "$dir/$f.pid"; then
      pid="$(cat "$dir/$f.pid")"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$f.pid"
  done
  # Whatever else this cluster started (slurmstepd, a job's processes).
  local left
  left="$(marked_pids)"
  if [ -n "$left" ]; then
    [ -n "$quiet" ] || say "killing leftover processes of this cluster: $(echo $left)"
    kill -KILL $left 2>/dev/null || true
  fi
}

case "$cmd" in
  start) start ;;
  stop)
    stop_daemons
    say "stopped the cluster in $dir"
    ;;
  env) print_env ;;
  status)
    if alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid"; then sinfo -N -l; else echo "not running"; exit 1; fi
    ;;
  logs) logs_tail ;;
  *)
    echo "usage: $0 start|stop|env|status|logs DIR" >&2
    exit 2
    ;;
esac
