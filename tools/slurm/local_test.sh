#!/bin/bash
# A distributed build on a local single-node Slurm (CI stage; label "slurm"):
# starts munged, slurmctld and slurmd with state, spool, sockets and ports of
# their own under a temporary folder, submits tools/slurm/submit.sh for a
# small pre-tokenized corpus in 4 shards, waits for the join step, checks the
# shard set (sam-inspect --verify) against the same 4 shards built here, then
# stops the daemons it started (by pid) and removes the folder.
#
#   tools/slurm/local_test.sh build/bin/sam-build build/bin/sam-inspect
#
# Needs Debian's slurm-wlm and munge, run as root (slurmd), with
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no cgroups).
# Exit 0: passed; 1: failed; 77: skipped (no Slurm, or not root).
set -u
build=$(realpath "$1") inspect=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
for b in munged slurmctld slurmd sbatch squeue; do
  command -v "$b" > /dev/null || { echo "SKIP: $b not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: slurmd needs root"; exit 77; }
tmp=$(mktemp -d /tmp/sam_slurm_XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null; done
  sleep 1
  for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log "$tmp"/work/*.out; do [[ -f $f ]] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

# munge, as the munge user, with a key and socket of its own.
# (munged wants its socket folder searchable by all, its key folder private.)
mkdir -p "$tmp/munge/key"
dd if=/dev/urandom of="$tmp/munge/key/munge.key" bs=1024 count=1 status=none
chown -R munge: "$tmp/munge"
chmod 755 "$tmp/munge"
chmod 700 "$tmp/munge/key"
chmod 400 "$tmp/munge/key/munge.key"
runuser -u munge -- munged --key-file="$tmp/munge/key/munge.key" --socket="$tmp/munge/munge.socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/munged.seed" || fail "munged did not start"
sleep 1
pids+=("$(cat "$tmp/munge/munged.pid")")

host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/work"
cat > "$tmp/slurm.conf" <<CONF
ClusterName=samtest
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
NodeName=$host CPUs=$(nproc) RealMemory=2048 State=UNKNOWN
PartitionName=samtest Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
sleep 2
[[ -f $tmp/slurmctld.pid ]] && pids+=("$(cat "$tmp/slurmctld.pid")")
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
sleep 2
[[ -f $tmp/slurmd.pid ]] && pids+=("$(cat "$tmp/slurmd.pid")")
for _ in $(seq 30); do
  sinfo -h -o %T 2> /dev/null | grep -q idle && break
  sleep 1
done
sinfo -h -o %T | grep -q idle || fail "the node did not come up: $(sinfo 2>&1)"

# A small corpus, the array of 4 tasks and the join.
python3 -c "
import random
random.seed(5)
for i in range(800): print([random.randrange(40) for _ in range(random.randrange(1, 120))])
" > "$tmp/work/docs.jsonl"
cd "$tmp/work"
"$here/submit.sh" --shards 4 --tokens 50000 --cpus 1 --out "$tmp/work/set" --sam-build "$build" \
  -- --vocab-size 40 --corpus ids="$tmp/work/docs.jsonl" || fail "submit.sh failed"
for _ in $(seq 120); do
  [[ -z $(squeue -h 2> /dev/null) ]] && break
  sleep 1
done
[[ -z $(squeue -h) ]] || fail "jobs still queued after 120 s: $(squeue)"
[[ -f $tmp/work/set.samset ]] || fail "no manifest written"
"$inspect" --verify "$tmp/work/set.samset" | tail -1 | grep -q "verify: OK" || fail "the set does not verify"
# The same shards built here: byte-identical but for the build time in META, so compare counts.
for i in 0 1 2 3; do
  "$build" -q --shard "$i/4" -o "$tmp/work/local.$i.sam" --vocab-size 40 \
    --corpus ids="$tmp/work/docs.jsonl" > /dev/null || fail "local shard $i"
  a=$("$inspect" --json "$tmp/work/set.$i.sam" | grep -E '"(tokens|documents|states)"')
  b=$("$inspect" --json "$tmp/work/local.$i.sam" | grep -E '"(tokens|documents|states)"')
  [[ $a == "$b" ]] || fail "shard $i differs from the local build"
done
echo "ok: 4-task Slurm job array and join step wrote a verified shard set"
