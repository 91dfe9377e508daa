#!/usr/bin/env bash
# The tests' own copy of ../shared/slurm/local-cluster.sh, started and stopped by
# tests/slurm_cluster.py (a private state directory and free ports per test session).
#
# local-cluster.sh - a real Slurm 22.05 cluster (munge + slurmctld + N slurmd
# "nodes" [+ slurmdbd/MariaDB for sacct]) on ONE machine, for tests.
# Uses Debian bookworm packages: slurm-wlm munge [slurmdbd mariadb-server].
# Multiple slurmd per host works because Debian builds Slurm with MULTIPLE_SLURMD.
#
#   local-cluster.sh up N     start (or reuse) cluster with nodes n1..nN, wait until idle
#   local-cluster.sh down     stop exactly the daemons started here (pid files)
#   local-cluster.sh status   show daemons and sinfo
#   local-cluster.sh env      print "export SLURM_CONF=..."
#   local-cluster.sh clean    down + remove all state
# Env: SLURM_LOCAL_DIR (default $TMPDIR/slurm-local-cluster), SLURM_LOCAL_PARTITION (debug),
#      SLURM_LOCAL_ACCOUNTING (auto|1|0; auto = on if slurmdbd+mariadbd installed),
#      SLURM_LOCAL_PORT_BASE (16800), SLURM_LOCAL_NODE_CPUS (nproc),
#      SLURM_LOCAL_HOSTS="NS1=ADDR1 NS2=ADDR2 ..." (ours): node n<i> runs as an emulated host of its
#        own (launch/spawn/hosts.py): its slurmd in network namespace NSi, reached at ADDRi, with
#        host name n<i>; then SLURM_LOCAL_CTLD_ADDR is this machine's address on their bridge.
# Clients (sbatch/srun/squeue/sacct/submitit) need: export SLURM_CONF=$SLURM_LOCAL_DIR/etc/slurm.conf
set -euo pipefail

BASE=${SLURM_LOCAL_DIR:-${TMPDIR:-/tmp}/slurm-local-cluster}
PART=${SLURM_LOCAL_PARTITION:-debug}
PB=${SLURM_LOCAL_PORT_BASE:-16800}
CTLD_PORT=$((PB + 17)); DBD_PORT=$((PB + 19)); DB_PORT=$((PB + 6)); NODE_PORT0=$((PB + 100))
NODE_CPUS=${SLURM_LOCAL_NODE_CPUS:-$(nproc)}
ETC=$BASE/etc; RUN=$BASE/run; LOG=$BASE/log
CONF=$ETC/slurm.conf; DBDCONF=$ETC/slurmdbd.conf
MSOCK=$RUN/munge.socket; DBSOCK=$RUN/mysqld.sock
HOST=$(hostname -s)
read -r -a HOSTS <<< "${SLURM_LOCAL_HOSTS:-}"
CTLD_ADDR=${SLURM_LOCAL_CTLD_ADDR:-127.0.0.1}
CLUSTER=localtest
DB_FAST_OPTS=(--innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --innodb-flush-method=nosync)
export SLURM_CONF=$CONF

log() { echo "[slurm-local $(date +%T.%3N)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

acct_enabled() {
  case ${SLURM_LOCAL_ACCOUNTING:-auto} in
    0|no|false) return 1 ;;
    1|yes|true) command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null \
                  || die "accounting requested but slurmdbd/mariadb-server not installed"; return 0 ;;
    *) command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null ;;
  esac
}

# pid_ok PIDFILE: pid file names a live (non-zombie) process whose cmdline or
# environment mentions $BASE, i.e. a daemon started by this script.
pid_ok() {
  local f=$1 pid st
  [[ -s $f ]] || return 1
  pid=$(<"$f"); [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/stat ]] || return 1
  st=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ $st != Z && $st != X ]] || return 1
  { tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "$BASE" && return 0
  { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CONF"
}

# stop_pid PIDFILE NAME: SIGTERM, wait up to 20 s, then SIGKILL
stop_pid() {
  local f=$1 name=$2 pid i
  if ! pid_ok "$f"; then
    # say why (a daemon left running by the test fixture is otherwise hard to explain)
    if [[ ! -s $f ]]; then log "$name: no pid file $f"; else log "$name: pid $(<"$f") from $f is not a live daemon of $BASE"; fi
    rm -f "$f"; return 0
  fi
  pid=$(<"$f"); log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do pid_ok "$f" || break; sleep 0.1; done
  if pid_ok "$f"; then log "$name did not stop, SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
  rm -f "$f"
}

wait_for() { # wait_for SECONDS DESCRIPTION CMD...
  local t=$1 what=$2 i; shift 2
  for ((i = 0; i < t * 10; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "timed out after ${t}s waiting for $what (logs in $LOG)"
}

node_names() { local n=$1 i; for ((i = 1; i <= n; i++)); do echo "n$i"; done; }

node_lines() { # node_lines N: slurm.conf's NodeName lines (one per emulated host, else one for all)
  local n=$1 i memmb common
  memmb=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)
  common="CPUs=$NODE_CPUS RealMemory=$memmb Gres=gpu:2 State=UNKNOWN"
  if (( ${#HOSTS[@]} == 0 )); then
    echo "NodeName=n[1-$n] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$NODE_PORT0-$((NODE_PORT0 + n - 1)) $common"
    return
  fi
  for ((i = 1; i <= n; i++)); do
    echo "NodeName=n$i NodeHostname=n$i NodeAddr=${HOSTS[i-1]#*=} Port=$((NODE_PORT0 + i - 1)) $common"
  done
}

start_slurmd() { # start_slurmd NODE: on its emulated host (namespace, host name) when there are some
  local node=$1 i=${1#n}
  if (( ${#HOSTS[@]} == 0 )); then slurmd -f "$CONF" -N "$node"; return; fi
  # as `ip netns exec` does (the namespace's /etc/netns/NS/hosts over /etc/hosts) but without its
  # fresh /sys, which has no cgroup file systems mounted: slurmd refuses to start without them
  local ns=${HOSTS[i-1]%%=*}
  nsenter --net="/var/run/netns/$ns" unshare --mount --uts sh -c \
    'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$0" && shift && exec "$@"' "$node" "$ns" \
    slurmd -f "$CONF" -N "$node"
}

write_conf() { # write_conf N -> writes $CONF.new
  local n=$1 acct
  (( ${#HOSTS[@]} == 0 || ${#HOSTS[@]} >= n )) || die "SLURM_LOCAL_HOSTS names ${#HOSTS[@]} hosts, $n nodes asked for"
  if acct_enabled; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MSOCK"
  else
    acct="AccountingStorageType=accounting_storage/none"
  fi
  # Two stand-in "GPUs" per node (character devices like /dev/null, where GPU device files would
  # be): GPU jobs are accepted and scheduled, and on this CPU-only machine fail where their ranks
  # start - what the tests check.
  local i; for i in 0 1; do [[ -c $ETC/nvidia$i ]] || mknod "$ETC/nvidia$i" c 1 3; done
  echo "NodeName=n[1-$n] Name=gpu File=$ETC/nvidia[0-1]" > "$ETC/gres.conf"
  cat > "$CONF.new" <<EOF
# generated by local-cluster.sh (nodes=$n)
ClusterName=$CLUSTER
SlurmctldHost=$HOST($CTLD_ADDR)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
AuthInfo=socket=$MSOCK
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$acct
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
InactiveLimit=0
MinJobAge=300
MailProg=/bin/true
GresTypes=gpu
$(node_lines "$n")
PartitionName=$PART Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_munge() {
  if pid_ok "$RUN/munged.pid"; then return 0; fi
  [[ -s $ETC/munge.key ]] || mungekey --create --keyfile="$ETC/munge.key" --force >/dev/null
  chmod 600 "$ETC/munge.key"
  rm -f "$MSOCK" "$MSOCK.lock"
  munged --force --key-file="$ETC/munge.key" --socket="$MSOCK" --pid-file="$RUN/munged.pid" \
    --log-file="$LOG/munged.log" --seed-file="$RUN/munged.seed"
  wait_for 10 munged bash -c "munge -S '$MSOCK' -n | unmunge -S '$MSOCK'"
  log "munged up (pid $(<"$RUN/munged.pid"))"
}

db_sql() { mariadb --no-defaults --socket="$DBSOCK" -uroot -e "$1"; }

start_db() {
  if pid_ok "$RUN/mariadbd.pid"; then return 0; fi
  if [[ ! -d $BASE/db/mysql ]]; then
    log "initialising MariaDB datadir (first time only)"
    mariadb-install-db --no-defaults --datadir="$BASE/db" --user=root \
      --auth-root-authentication-method=normal --skip-test-db "${DB_FAST_OPTS[@]}" \
      > "$LOG/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed, see $LOG/mariadb-install.log"
  fi
  setsid mariadbd --no-defaults --user=root --datadir="$BASE/db" --socket="$DBSOCK" \
    --port=$DB_PORT --bind-address=127.0.0.1 --pid-file="$RUN/mariadbd.pid" \
    --log-error="$LOG/mariadbd.log" --skip-log-bin --innodb-buffer-pool-size=128M \
    --innodb-lock-wait-timeout=900 "${DB_FAST_OPTS[@]}" < /dev/null > /dev/null 2>&1 &
  wait_for 60 mariadbd db_sql "SELECT 1"
  db_sql "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  log "mariadbd up (pid $(<"$RUN/mariadbd.pid"))"
}

start_dbd() {
  if pid_ok "$RUN/slurmdbd.pid"; then return 0; fi
  cat > "$DBDCONF" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DBDCONF"
  slurmdbd  # reads slurmdbd.conf next to $SLURM_CONF, daemonizes, writes PidFile
  wait_for 30 slurmdbd sacctmgr -n -P list cluster
  # register the cluster before slurmctld starts: otherwise slurmctld's first
  # registration blocks ~15 s while slurmdbd creates tables and calls back.
  if [[ -z $(sacctmgr -n -P list cluster "$CLUSTER" format=cluster 2>/dev/null) ]]; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
  log "slurmdbd up (pid $(<"$RUN/slurmdbd.pid"))"
}

nodes_idle() { # all N nodes idle (or mixed/alloc = usable)
  local n=$1 c
  c=$(sinfo -h -N -r -p "$PART" -t idle,mix,alloc -o %N 2>/dev/null | sort -u | wc -l)
  [[ $c -eq $n ]]
}

stop_slurm_daemons() {
  local f
  if pid_ok "$RUN/slurmctld.pid"; then
    # cancel leftover jobs so no slurmstepd/job processes outlive their slurmd
    if [[ -n $(squeue -h -o %A 2>/dev/null) ]]; then
      log "cancelling remaining jobs"; scancel --full $(squeue -h -o %A) 2>/dev/null || true
      for ((i = 0; i < 100; i++)); do [[ -z $(squeue -h -t R,CG,S -o %A 2>/dev/null) ]] && break; sleep 0.1; done
    fi
  fi
  for f in "$RUN"/slurmd-*.pid; do [[ -e $f ]] && stop_pid "$f" "slurmd $(basename "$f" .pid | cut -d- -f2)"; done
  stop_pid "$RUN/slurmctld.pid" slurmctld
}

cmd_up() {
  local n=${1:-2} node changed=0 t0=$SECONDS
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "usage: $0 up N"
  for b in munged mungekey slurmctld slurmd sinfo; do command -v $b >/dev/null || die "$b not found (apt-get install slurm-wlm munge)"; done
  mkdir -p "$ETC" "$RUN" "$LOG" "$BASE/state" "$BASE/db"
  chmod 700 "$ETC"; chmod 755 "$RUN"
  write_conf "$n"
  if ! cmp -s "$CONF.new" "$CONF"; then changed=1; mv "$CONF.new" "$CONF"; else rm -f "$CONF.new"; fi
  # stale slurmd of nodes beyond N, or a config change while running -> restart slurm daemons
  for f in "$RUN"/slurmd-n*.pid; do
    [[ -e $f ]] || continue; node=$(basename "$f" .pid); node=${node#slurmd-n}
    if (( node > n )) || (( changed )); then stop_pid "$f" "slurmd n$node"; fi
  done
  (( changed )) && stop_pid "$RUN/slurmctld.pid" slurmctld
  start_munge
  if acct_enabled; then start_db; start_dbd; fi
  if ! pid_ok "$RUN/slurmctld.pid"; then
    slurmctld -f "$CONF" -i
    wait_for 30 slurmctld bash -c "scontrol ping | grep -q 'is UP'"
    log "slurmctld up (pid $(<"$RUN/slurmctld.pid"))"
  fi
  for node in $(node_names "$n"); do
    mkdir -p "$BASE/spool/$node"
    pid_ok "$RUN/slurmd-$node.pid" && continue
    start_slurmd "$node"
  done
  for ((i = 0; i < 600; i++)); do
    nodes_idle "$n" && break
    # a node left DOWN/DRAIN by an earlier unclean stop: resume it
    if (( i % 50 == 49 )); then
      for node in $(sinfo -h -N -p "$PART" -t down,drain,fail -o %N | sort -u); do
        scontrol update NodeName="$node" State=RESUME 2>/dev/null || true
      done
    fi
    sleep 0.1
  done
  nodes_idle "$n" || { sinfo -N >&2; die "nodes not idle after 60s (logs in $LOG)"; }
  log "cluster up: $n node(s) idle in $((SECONDS - t0))s; export SLURM_CONF=$CONF"
  echo "$PART"
}

cmd_down() {
  local t0=$SECONDS
  [[ -d $RUN ]] || { log "nothing to stop"; return 0; }
  stop_slurm_daemons
  stop_pid "$RUN/slurmdbd.pid" slurmdbd
  stop_pid "$RUN/mariadbd.pid" mariadbd
  stop_pid "$RUN/munged.pid" munged
  log "down in $((SECONDS - t0))s"
}

cmd_status() {
  local f any=0
  echo "SLURM_CONF=$CONF"
  for f in munged mariadbd slurmdbd slurmctld; do
    if pid_ok "$RUN/$f.pid"; then echo "$f: running (pid $(<"$RUN/$f.pid"))"; any=1; else echo "$f: stopped"; fi
  done
  for f in "$RUN"/slurmd-*.pid; do
    [[ -e $f ]] || continue
    if pid_ok "$f"; then echo "$(basename "$f" .pid): running (pid $(<"$f"))"; any=1; else echo "$(basename "$f" .pid): stopped"; fi
  done
  if pid_ok "$RUN/slurmctld.pid"; then sinfo -N -l; fi
  (( any )) || return 3
}

case ${1:-} in
  up) cmd_up "${2:-2}" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  clean) cmd_down; rm -rf "$BASE"; log "removed $BASE" ;;
  *) echo "usage: $0 {up N|down|status|env|clean}" >&2; exit 2 ;;
esac
