#!/usr/bin/env bash
# CI lane: rdmaspawn under a real Slurm cluster on this machine (issue 28).
#
#   CI_REPO=... CI_WORK=... [CI_PYENV=...] bash .ci/lanes/slurm.sh      (as root)
#
# Debian 12's munge, slurmctld, slurmd and slurm-client (22.05), started here
# by hand (no systemd):
# 1. A venv of pyenv's newest CPython 3.13 (multiprocessing's default is still
#    fork there) with `pip install -e '.[test]'` of a scratch copy; the
#    tasks run its python and its rdmaspawn.
# 2. munged (key in a 0700 directory, socket in a 0755 one: munged refuses a
#    socket directory others cannot enter; AuthInfo=socket= tells Slurm where),
#    slurmctld and two slurmd (NodeName n1 and n2 on localhost, each with its
#    own Port=, free ports picked here).  Core dumps are off: the controls'
#    children crash by design.
# 3. pytest tests/cluster/test_slurm.py -k "not taskprolog": srun -n2 and
#    sbatch jobs whose ranks (tests/cluster/rank.py) hold the hazard and start
#    children four ways: the controls crash or hang, `rdmaspawn run` and
#    RDMASPAWN=on exported before srun do not.
# 4. docs/slurm.md's TaskProlog lines, taken from the page at run time (only
#    /etc/slurm/ and /opt/rdmaspawn/ changed to this lane's paths), added to
#    slurm.conf; `scontrol reconfigure`; pytest -k taskprolog.
# Every daemon is stopped by pid at the end, failure or not.  A skipped test
# fails the lane (the tests skip outside it).  The log ends with pytest's
# closing lines and "LANE: N passed, N failed" (N counts the two pytest runs);
# the exit status is non-zero if anything failed.  Logs stay in CI_WORK/log.
set -uo pipefail
exec </dev/null

: "${CI_REPO:?CI_REPO must name the checkout}" "${CI_WORK:?CI_WORK must name a scratch directory}"
pyenv=${CI_PYENV:-$HOME/.pyenv/versions}
start=$SECONDS
say() { printf '=== slurm.sh [%4ds] %s\n' "$((SECONDS - start))" "$*"; }
w=$(cd "$CI_WORK" && pwd)
daemons=()
stop_daemons() {
  local pid
  for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  done
  daemons=()
}
trap stop_daemons EXIT
trap "exit 143" TERM INT HUP
die() { say "FAILED: $*"; echo "LANE: 0 passed, 1 failed"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (SlurmUser=root; slurmd starts the tasks)"

chmod 755 "$w"
ulimit -c 0
mkdir -p "$w/log"

# --- 1. venv ------------------------------------------------------------------
v=$(ls "$pyenv" 2>/dev/null | grep -E '^3\.13\.[0-9]+$' | sort -V | tail -n 1)
[ -n "$v" ] || die "no CPython 3.13 under $pyenv"
say "venv of CPython $v, pip install -e '.[test]' of a scratch copy"
src=$w/src venv=$w/venv
mkdir -p "$src"
(cd "$CI_REPO" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src") \
  || die "could not copy the checkout"
"$pyenv/$v/bin/python" -m venv "$venv" || die "venv"
"$venv/bin/python" -m pip install -q -e "$src[test]" >"$w/log/pip.log" 2>&1 \
  || { tail -n 20 "$w/log/pip.log"; die "pip install"; }
# The tasks run as root here, but a reader of the paths may not be.
chmod -R a+rX "$src" "$venv"

# --- 2. munged, slurmctld, two slurmd ----------------------------------------
say "munged, slurmctld, slurmd n1 and n2"
mkdir -p "$w/munge-key" "$w/munge-run" "$w/state" "$w/spool/n1" "$w/spool/n2" "$w/etc"
chmod 700 "$w/munge-key"
chmod 755 "$w/munge-run"
mungekey -c -k "$w/munge-key/munge.key" || die "mungekey"
sock=$w/munge-run/munge.socket
munged --foreground --force --key-file="$w/munge-key/munge.key" --socket="$sock" \
  --pid-file="$w/munge-run/munged.pid" --log-file="$w/log/munged.log" \
  --seed-file="$w/munge-key/munge.seed" >>"$w/log/munged.log" 2>&1 &
daemons+=($!)

# Three free ports (slurmctld, n1, n2): bound at once, so they differ.
read -r p0 p1 p2 < <("$venv/bin/python" -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
conf=$w/etc/slurm.conf
cat >"$conf" <<CONF
ClusterName=rdmaspawnci
SlurmctldHost=localhost
SlurmctldPort=$p0
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$w/state
SlurmdSpoolDir=$w/spool/%n
SlurmctldPidFile=$w/state/slurmctld.pid
SlurmdPidFile=$w/spool/slurmd-%n.pid
SlurmctldLogFile=$w/log/slurmctld.log
SlurmdLogFile=$w/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$p1 CPUs=2 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$p2 CPUs=2 State=UNKNOWN
PartitionName=main Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
chmod -R a+rX "$w/etc"
export SLURM_CONF=$conf
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$w/log/munged.log"; die "munged did not start"; }
slurmctld -D -f "$conf" >"$w/log/slurmctld.out" 2>&1 &
daemons+=($!)
for n in n1 n2; do
  slurmd -D -f "$conf" -N "$n" >"$w/log/slurmd-$n.out" 2>&1 &
  daemons+=($!)
done
up=""
for _ in $(seq 60); do
  if [ "$(sinfo -h -o '%t' 2>/dev/null | sort -u | tr -d '\n')" = idle ]; then up=1; break; fi
  sleep 0.5
done
[ -n "$up" ] || { sinfo; tail -n 20 "$w"/log/*; die "the nodes did not come up idle"; }
sinfo
say "cluster up (daemons: ${daemons[*]})"

# --- 3./4. the tests -----------------------------------------------------------
export RDMASPAWN_SLURM_LANE=$w RDMASPAWN_SLURM_WAY_TIMEOUT=5
passed=0 failed=0
# run_pytest SELECTION NAME: pytest on the cluster; a skip counts as a failure.
run_pytest() {
  local log=$w/log/pytest-$2.log rc
  (cd "$w" && "$venv/bin/python" -m pytest -p no:cacheprovider -rs -v --durations=0 \
      "$src/tests/cluster/test_slurm.py" -k "$1") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1)); say "pytest -k '$1' failed ($rc)"
  elif grep -qE '(^SKIPPED|[0-9]+ skipped)' "$log"; then
    failed=$((failed + 1)); say "pytest -k '$1': a test skipped, which the lane does not allow"
  else
    passed=$((passed + 1))
  fi
}
say "pytest: the controls, rdmaspawn run, RDMASPAWN=on"
run_pytest "not taskprolog" ways

# doc_block NAME: the fenced block after "<!-- slurm-lane: NAME -->" in docs/slurm.md.
doc_block() {
  awk -v want="<!-- slurm-lane: $1 -->" '
    $0 == want { found = 1; next }
    found == 1 && /^```/ { found = 2; next }
    found == 2 && /^```/ { exit }
    found == 2 { print }' "$src/docs/slurm.md"
}
lane_paths() { sed -e "s|/etc/slurm/|$w/etc/|g" -e "s|/opt/rdmaspawn/|$venv/|g"; }
say "the TaskProlog lines of docs/slurm.md"
doc_block rdmaspawn-taskprolog | lane_paths >"$w/etc/rdmaspawn-taskprolog"
doc_block slurm.conf | lane_paths >"$w/etc/taskprolog.conf"
chmod 755 "$w/etc/rdmaspawn-taskprolog"
grep -qx "TaskProlog=$w/etc/rdmaspawn-taskprolog" "$w/etc/taskprolog.conf" \
  && grep -q 'rdmaspawn taskprolog' "$w/etc/rdmaspawn-taskprolog" \
  || die "docs/slurm.md lacks its TaskProlog blocks"
cat "$w/etc/taskprolog.conf" >>"$conf"
cat "$w/etc/taskprolog.conf" "$w/etc/rdmaspawn-taskprolog"
scontrol reconfigure || die "scontrol reconfigure"
# reconfigure reaches the slurmd by message: wait until both run the new config.
for _ in $(seq 40); do
  [ "$(scontrol show config | awk '$1 == "TaskProlog" {print $3}')" = "$w/etc/rdmaspawn-taskprolog" ] \
    && [ "$(sinfo -h -o '%t' | sort -u | tr -d '\n')" = idle ] && break
  sleep 0.5
done
run_pytest "taskprolog" taskprolog

stop_daemons
say "done"
echo "LANE: $passed passed, $failed failed ($((SECONDS - start)) s)"
[ "$failed" -eq 0 ]
