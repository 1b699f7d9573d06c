#!/usr/bin/env bash
# atoll's main job, end to end: installs what is missing, builds atoll and the
# example programs, then runs real workloads on several kernels of a node,
# including processes migrated live between kernels (hand-over and copy
# mode, with their downtime), a checkpoint restored from a file, a process
# with threads moved while they wait, Minix IPC between processes on one
# kernel and across kernels, and an MPI job (HPL) with a rank moved while
# it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
make -s all
cargo build --release --locked -p atoll-cli
atoll=target/release/atoll
export ATOLL_CACHE="$PWD/target/atoll-cache"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# The PID of the running process named $1, once the node lists it.
pid_of() {
    local pid=
    until [ -n "$pid" ]; do
        sleep 0.1
        pid=$($atoll ps 2>/dev/null | awk -v name="$1" '$4 ~ name {print $1}')
    done
    echo "$pid"
}

step "hello, on kernel 3 of a 4-kernel node"
$atoll run --kernels 4 --on 3 build/wasm/hello.wasm from the demo

step "8 children spread over 4 kernels, each waited for by its parent"
$atoll run --kernels 4 build/wasm/spawn.wasm 8

step "fork() for WebAssembly: a process with 4 MiB of heap copied onto kernel 2; the child forks again"
$atoll run --kernels 4 build/wasm/fork.wasm 2

step "mergesort of 1M integers: native, then prepared (migratable) wasm"
# The first run of a module prepares and compiles it; both are cached.
$atoll run build/wasm/mergesort.wasm 1000 >/dev/null
$atoll run build/wasm/progress.wasm 1 1 >/dev/null
time build/native/mergesort 1000000 1 2
time $atoll run build/wasm/mergesort.wasm 1000000 1 2

step "a node daemon with 4 kernels; a long computation moved between kernels while it runs"
export ATOLL_SOCKET="$PWD/target/demo-node.sock"
$atoll node --kernels 4 2>/dev/null &
node=$!
trap 'kill $node 2>/dev/null' EXIT
until $atoll ps >/dev/null 2>&1; do sleep 0.1; done
$atoll run --on 0 build/wasm/progress.wasm 40 30000000 | tee target/demo-moved.txt &
job=$!
pid=$(pid_of progress)
$atoll ps 2>/dev/null
# Hand-over between kernels of the node, then copy mode (pre-copy rounds
# while it runs, then stop-and-copy): each prints its downtime.
modes=(handover copy handover copy)
for i in 0 1 2 3; do
    sleep 0.3
    $atoll migrate "$pid" --to $(( (i + 1) % 4 )) --mode "${modes[$i]}"
done
$atoll ps 2>/dev/null
wait $job
$atoll run --embedded build/wasm/progress.wasm 40 30000000 > target/demo-unmoved.txt
cmp target/demo-moved.txt target/demo-unmoved.txt
echo "the moved computation printed exactly what an unmoved run prints"

step "a 64 MiB process rewriting 512 KiB: live migration in copy mode, with pre-copy"
$atoll run --on 1 build/wasm/dirty.wasm 64 512 0 >/dev/null &
big=$!
pid=$(pid_of dirty)
sleep 1
$atoll migrate "$pid" --to 2 --mode copy
$atoll migrate "$pid" --to 3 --mode handover
$atoll kill "$pid"
wait $big || true

step "checkpoint to a file, and restore"
$atoll run --on 0 build/wasm/progress.wasm 20 30000000 > target/demo-checkpointed.txt &
job=$!
pid=$(pid_of progress)
sleep 0.5
$atoll checkpoint "$pid" -o target/demo-progress.img
wait $job || true
$atoll restore target/demo-progress.img --on 2 >> target/demo-checkpointed.txt
$atoll run --embedded build/wasm/progress.wasm 20 30000000 > target/demo-unmoved.txt
cmp target/demo-checkpointed.txt target/demo-unmoved.txt
echo "checkpointed, restored on another kernel, and the output is exactly an unbroken run's"

step "POSIX threads: a process whose threads wait on a condition, a mutex, a join, a sleep, an IPC receive and a semaphore, moved while they do"
$atoll run --on 0 build/wasm/threadmix.wasm 2000 > target/demo-threads.txt &
job=$!
# It spawns a child of its name: the first listed is the parent. (Not
# `| head -n 1`: under pipefail, head leaving early can end the script.)
pid=$(pid_of threadmix)
pid=${pid%%$'\n'*}
until grep -q ready target/demo-threads.txt; do sleep 0.1; done
$atoll ps --threads 2>/dev/null
$atoll migrate "$pid" --to 1 --mode copy
$atoll migrate "$pid" --to 2 --mode handover
wait $job
cat target/demo-threads.txt

step "Minix IPC in a domain of its own: 16 client/server pairs over the node's 4 kernels"
$atoll domain create demo
$atoll domain list
$atoll run --domain demo build/wasm/ipc.wasm stress same 16 2000
$atoll ipc
$atoll domain end demo

step "MPI (libatollmpi, atoll run -n): HPL (Debian's HPCC source) on 4 ranks over the 4 kernels, one rank moved while it solves"
mkdir -p target/demo-hpl
$atoll run -n 4 --dir target/demo-hpl::. build/wasm/hpl.wasm 2000 80 2 2 > target/demo-hpl.txt &
job=$!
# Once all four ranks are up, the last one listed (on kernel 3) moves to kernel 0.
until [ "$(pid_of hpl | wc -l)" -ge 4 ]; do sleep 0.1; done
rank=$(pid_of hpl | tail -n 1)
sleep 0.3
$atoll migrate "$rank" --to 0 --mode copy
wait $job
grep -E '^T/V +N|^WR|PASSED|FAILED' target/demo-hpl.txt
echo "and the MPI point-to-point suite with every rank moving itself between kernels as it runs:"
$atoll run -n 4 --tag-output --env ATOLL_MPI_TEST_MOVE=1 build/wasm/pt2pt.wasm 2>/dev/null

step "the DQDT and the balancer: 16 CPU-bound processes forked onto kernel 0, spread while they run"
$atoll run build/wasm/balance.wasm 16 40000000 0 > target/demo-balance.txt &
job=$!
# Once the parent and its children are running (the module compiles first).
for _ in $(seq 200); do
    [ "$($atoll ps 2>/dev/null | grep -c balance)" -ge 12 ] && break
    sleep 0.05
done
sleep 0.1
$atoll top --once
wait $job
echo "where the 16 processes ended (all started on kernel 0):"
awk '/ child=/ {print $4}' target/demo-balance.txt | sort | uniq -c
tail -n 1 target/demo-balance.txt

step "sendrec round trips with one kernel per core: both ends on one kernel, then on two"
# With more kernels than cores (the daemon above) idle kernels sleep rather
# than spin, and a message between kernels pays a futex wake-up.
$atoll run --embedded --kernels 2 --on 0 build/wasm/ipcbench.wasm ipc2 same 200000
$atoll run --embedded --kernels 2 --on 0 build/wasm/ipcbench.wasm ipc2 other 200000

step "three nodes joined by mutual TLS on loopback; a computation moved live from node to node and back"
kill $node 2>/dev/null || true
trap 'bash scripts/cluster.sh stop' EXIT
bash scripts/cluster.sh start 3 2
n0() { ATOLL_SOCKET=target/cluster/n0.sock $atoll "$@"; }
n2() { ATOLL_SOCKET=target/cluster/n2.sock $atoll "$@"; }
n0 run --on 0.0 build/wasm/progress.wasm 40 30000000 | tee target/demo-nodes.txt &
job=$!
pid=
until [ -n "$pid" ]; do sleep 0.1; pid=$(n0 ps 2>/dev/null | awk '$4 ~ /progress/ {print $1}'); done
# Between nodes a move is always a copy: pre-copy rounds over the bulk
# link while it runs, then stop-and-copy. Asked from any node.
for to in 1.0 2.1 0.1; do
    sleep 0.3
    n2 migrate "$pid" --to "$to"
    n2 ps 2>/dev/null | grep -E "^PID|progress"
done
wait $job
$atoll run --embedded build/wasm/progress.wasm 40 30000000 > target/demo-unmoved.txt
cmp target/demo-nodes.txt target/demo-unmoved.txt
echo "moved over three nodes and back: the output is exactly an unmoved run's"
n0 run build/wasm/roam.wasm 3 2 | tail -n 1
