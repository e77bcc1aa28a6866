#!/bin/sh
# Multi-node `dpinfer launch` on two real network hosts: two network namespaces
# joined by a veth pair (10.231.0.1 and 10.231.0.2), one launcher per namespace,
# as one launcher per node on a cluster. Checks:
#   1. the rank arithmetic of --nnodes 2 --node-rank R --nproc-per-node 2, and the
#      same layout taken from SLURM step variables instead of flags;
#   2. dpinfer generate (the fake-pipeline worker) across both: every item exactly
#      once, metadata.jsonl complete;
#   3. a node killed mid-run (SIGKILL to every process of node 1): node 0 exits
#      non-zero within the rendezvous timeout, with an error naming the missing
#      ranks and the store, instead of hanging.
#
# usage: multinode_test.sh DPINFER [TEST_WORKER]   (parts 2 and 3 need TEST_WORKER)
#
# Needs root and `ip netns` (iproute2). Without them the test FAILS: it is the only
# test of real multi-host networking, and a skip would hide that it did not run.
# The namespaces and the veth pair carry this shell's pid in their names, so that
# concurrent runs do not clash (the addresses live inside the namespaces, so they
# cannot clash), and they are removed on every exit path.
set -u

DPINFER=${1:?usage: multinode_test.sh DPINFER [TEST_WORKER]}
WORKER=${2:-}
TAG=dpi$$
NS0=${TAG}n0
NS1=${TAG}n1
ADDR0=10.231.0.1
ADDR1=10.231.0.2
PORT=29531

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dpinfer-netns.XXXXXX") || fail "mktemp failed"
cleanup() {
  for ns in "$NS0" "$NS1"; do
    if ip netns list 2>/dev/null | grep -q "^$ns\\b"; then
      # Only processes this test started live in its namespaces.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
      ip netns del "$ns" 2>/dev/null
    fi
  done
  ip link del "${TAG}v0" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

[ "$(id -u)" = 0 ] || fail "must run as root: it creates network namespaces (ip netns); run ctest -L netns as root"
command -v ip >/dev/null 2>&1 || fail "'ip' (iproute2) not found: install iproute2 (apt-get install iproute2)"
command -v timeout >/dev/null 2>&1 || fail "'timeout' (coreutils) not found"

ip netns add "$NS0" || fail "ip netns add $NS0 failed: network namespaces are unavailable here (needs CAP_SYS_ADMIN)"
ip netns add "$NS1" || fail "ip netns add $NS1 failed"
ip link add "${TAG}v0" type veth peer name "${TAG}v1" || fail "cannot create a veth pair"
ip link set "${TAG}v0" netns "$NS0" || fail "cannot move the veth end into $NS0"
ip link set "${TAG}v1" netns "$NS1" || fail "cannot move the veth end into $NS1"
ip -n "$NS0" addr add "$ADDR0/24" dev "${TAG}v0" || fail "cannot set $ADDR0"
ip -n "$NS1" addr add "$ADDR1/24" dev "${TAG}v1" || fail "cannot set $ADDR1"
for ns in "$NS0" "$NS1"; do
  ip -n "$ns" link set lo up || fail "cannot bring lo up in $ns"
done
ip -n "$NS0" link set "${TAG}v0" up || fail "cannot bring the veth up in $NS0"
ip -n "$NS1" link set "${TAG}v1" up || fail "cannot bring the veth up in $NS1"
echo "namespaces $NS0 ($ADDR0) and $NS1 ($ADDR1) are up"

# node R PORT ARGS...: `dpinfer launch` for node R inside its namespace, in the
# background; output in $WORK/nodeR.{out,err}, pid in $WORK/nodeR.pid.
node() {
  r=$1
  shift
  port=$1
  shift
  ns=$NS0
  [ "$r" = 1 ] && ns=$NS1
  CUDA_VISIBLE_DEVICES= ip netns exec "$ns" "$DPINFER" launch --nnodes 2 --node-rank "$r" --nproc-per-node 2 \
    --master-addr "$ADDR0" --master-port "$port" "$@" >"$WORK/node$r.out" 2>"$WORK/node$r.err" &
  echo $! >"$WORK/node$r.pid"
}

# wait_node R SECONDS: waits for node R's launcher; sets STATUS (124: still running).
wait_node() {
  pid=$(cat "$WORK/node$1.pid")
  waited=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$(($2 * 10))" ]; then
      STATUS=124
      return
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  wait "$pid"
  STATUS=$?
}

show() {
  for r in 0 1; do
    echo "--- node $r stdout" >&2
    cat "$WORK/node$r.out" >&2
    echo "--- node $r stderr" >&2
    cat "$WORK/node$r.err" >&2
  done
}

# 1. Rank arithmetic: node R runs ranks 2R and 2R+1.
node 0 "$PORT" -- sh -c 'echo ranks $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT'
node 1 "$PORT" -- sh -c 'echo ranks $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT'
for r in 0 1; do
  wait_node $r 60
  [ "$STATUS" = 0 ] || { show; fail "part 1: node $r's launcher exited with $STATUS"; }
done
for expect in "0] ranks 0 0 4 0" "1] ranks 1 1 4 0"; do
  grep -q "\\[rank $expect $ADDR0:$PORT\$" "$WORK/node0.out" || { show; fail "part 1: node 0 lacks '[rank $expect'"; }
done
for expect in "2] ranks 2 0 4 1" "3] ranks 3 1 4 1"; do
  grep -q "\\[rank $expect $ADDR0:$PORT\$" "$WORK/node1.out" || { show; fail "part 1: node 1 lacks '[rank $expect'"; }
done
echo "part 1 ok: ranks 0,1 on $NS0 and 2,3 on $NS1, master $ADDR0:$PORT"

# 1b. The same under "srun --ntasks-per-node=1 dpinfer launch": no node options,
#     the layout from the step's variables (src/launcher/slurm_layout.cpp), the
#     port derived from SLURM_JOB_ID and SLURM_STEP_ID as the workers derive it (job 123, step 0: 15123).
for r in 0 1; do
  ns=$NS0
  [ "$r" = 1 ] && ns=$NS1
  CUDA_VISIBLE_DEVICES= SLURM_JOB_ID=123 SLURM_STEP_ID=0 SLURM_STEP_NUM_NODES=2 SLURM_NODEID=$r \
    SLURM_STEP_NODELIST="$ADDR0,$ADDR1" SLURM_STEP_TASKS_PER_NODE="1(x2)" \
    ip netns exec "$ns" "$DPINFER" launch -v --nproc-per-node 2 -- sh -c 'echo ranks $RANK $GROUP_RANK $MASTER_ADDR:$MASTER_PORT' \
    >"$WORK/node$r.out" 2>"$WORK/node$r.err" &
  echo $! >"$WORK/node$r.pid"
done
for r in 0 1; do
  wait_node $r 60
  [ "$STATUS" = 0 ] || { show; fail "part 1b: node $r's launcher exited with $STATUS"; }
done
grep -q "\\[rank 1\\] ranks 1 0 $ADDR0:15123\$" "$WORK/node0.out" || { show; fail "part 1b: node 0 lacks rank 1"; }
grep -q "\\[rank 3\\] ranks 3 1 $ADDR0:15123\$" "$WORK/node1.out" || { show; fail "part 1b: node 1 lacks rank 3"; }
grep -q "node rank 1 from SLURM_NODEID" "$WORK/node1.err" || { show; fail "part 1b: -v does not say where the node rank came from"; }
echo "part 1b ok: under a (simulated) SLURM step the launchers took nnodes, node rank, master and port from it"

if [ -z "$WORKER" ]; then
  echo "no TEST_WORKER given (a build without LibTorch): parts 2 and 3 need it"
  exit 0
fi

# 2. dpinfer generate across both nodes, outputs on a shared directory.
N=23
i=0
: >"$WORK/p.txt"
while [ $i -lt $N ]; do
  echo "prompt number $i" >>"$WORK/p.txt"
  i=$((i + 1))
done
PORT2=$((PORT + 1))
node 0 "$PORT2" -- "$WORKER" generate "$WORK/p.txt" --out "$WORK/out" --rendezvous-timeout 60
node 1 "$PORT2" -- "$WORKER" generate "$WORK/p.txt" --out "$WORK/out" --rendezvous-timeout 60
for r in 0 1; do
  wait_node $r 120
  [ "$STATUS" = 0 ] || { show; fail "part 2: node $r's launcher exited with $STATUS"; }
done
[ "$(ls "$WORK/out"/manifest.rank*.jsonl | wc -l)" = 4 ] || { show; fail "part 2: expected 4 rank manifests"; }
# Every index exactly once among the ok records of all manifests, and in metadata.jsonl.
cat "$WORK/out"/manifest.rank*.jsonl | grep '"status":"ok"' | grep -o '"index":[0-9]*' | sort | uniq -c |
  awk -v n=$N '$1 != 1 { bad = 1 } END { exit (bad || NR != n) }' ||
  { show; fail "part 2: the manifests do not hold each of the $N items exactly once"; }
[ "$(grep -c '"file_name"' "$WORK/out/metadata.jsonl")" = $N ] || { show; fail "part 2: metadata.jsonl lacks rows"; }
[ "$(grep -o '"index":[0-9]*' "$WORK/out/metadata.jsonl" | sort -u | wc -l)" = $N ] ||
  { show; fail "part 2: metadata.jsonl does not list $N distinct items"; }
[ "$(ls "$WORK/out"/*.png | wc -l)" = $N ] || { show; fail "part 2: expected $N PNGs"; }
grep -q "done: $N generated" "$WORK/node0.err" || { show; fail "part 2: node 0 did not report $N generated"; }
"$DPINFER" status "$WORK/out" --prompts "$WORK/p.txt" >"$WORK/status.out" ||
  { cat "$WORK/status.out" >&2; fail "part 2: dpinfer status says the run is incomplete"; }
echo "part 2 ok: $N items across 4 ranks on 2 hosts, each exactly once"

# 3. Node 1 dies mid-run (every process in its namespace gets SIGKILL, as a power
#    loss would). Node 0 must not hang: its ranks fail within the timeout.
TIMEOUT=5
PORT3=$((PORT + 2))
rm -rf "$WORK/out3"
export DPINFER_FAKE_DELAY_MS=500  # the fake pipeline's time per image: ~3 s per rank
node 0 "$PORT3" -- "$WORKER" generate "$WORK/p.txt" --out "$WORK/out3" --rendezvous-timeout $TIMEOUT
node 1 "$PORT3" -- "$WORKER" generate "$WORK/p.txt" --out "$WORK/out3" --rendezvous-timeout $TIMEOUT
waited=0
until [ "$(ls "$WORK/out3"/*.png 2>/dev/null | wc -l)" -ge 2 ]; do
  [ $waited -lt 600 ] || { show; fail "part 3: no image appeared within 60 s"; }
  sleep 0.1
  waited=$((waited + 1))
done
for pid in $(ip netns pids "$NS1"); do kill -9 "$pid" 2>/dev/null; done
echo "part 3: killed every process of node 1 ($NS1)"
START=$(date +%s)
wait_node 0 $((TIMEOUT * 6 + 30))
ELAPSED=$(($(date +%s) - START))
[ "$STATUS" != 124 ] || { show; fail "part 3: node 0 still runs $ELAPSED s after node 1 died: it hangs"; }
[ "$STATUS" != 0 ] || { show; fail "part 3: node 0 exited 0 although half of the ranks died"; }
# Rank 1 waits at the 'finished' barrier for 2 and 3 (and 0, itself waiting for
# their reports), or rank 0 for rank 2's report: either names the dead ranks.
grep -Eq "for rank\\(s\\) ([0-9]+, )*2, 3 \\(store $ADDR0:$PORT3\\)|for rank [23]'s" "$WORK/node0.err" ||
  { show; fail "part 3: node 0's error does not name the dead ranks and the store"; }
grep -q "worker group failed" "$WORK/node0.err" || { show; fail "part 3: node 0's launcher gave no failure summary"; }
echo "part 3 ok: node 0 exited with $STATUS after $ELAPSED s, naming the dead ranks:"
grep -E "error: .*(rank\\(s\\) ([0-9]+, )*2, 3|rank [23]'s)" "$WORK/node0.err" | head -2
exit 0
