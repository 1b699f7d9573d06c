#!/usr/bin/env bash
# One atoll node per machine of a Slurm allocation, joined into one cluster.
#
#   srun --nodes=N --ntasks-per-node=1 deploy/slurm/atoll-node.sh &
#
# Each task runs `atoll node` on its machine: the allocation's first
# machine (SLURM_NODEID 0) starts the cluster, the others join it. Node ids
# are Slurm's node ids, so kernel 1.3 is kernel 3 of the allocation's
# second machine.
#
# Certificates (see docs/deploy.md): $ATOLL_CERTS (default ~/.atoll/certs)
# must hold ca.pem and, for each machine, HOSTNAME.pem and HOSTNAME.key,
# issued beforehand with `atoll ca issue DIR HOSTNAME` (short host names).
# The CA's key (ca.key) does not belong there.
#
# Environment: ATOLL (the atoll binary, default: atoll on PATH),
# ATOLL_PORT (default 7700), ATOLL_KERNELS (default: one per core).
set -euo pipefail
atoll=${ATOLL:-atoll}
certs=${ATOLL_CERTS:-$HOME/.atoll/certs}
port=${ATOLL_PORT:-7700}
name=$(hostname -s)
: "${SLURM_NODEID:?run this under srun, one task per node}"
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
# Where the others reach this machine: its address as the first machine
# resolves it.
addr=$(getent ahostsv4 "$name" | awk 'NR == 1 {print $1}')
args=(node --listen "0.0.0.0:$port" --advertise "$addr:$port"
      --certs "$certs" --name "$name" --node-id "$SLURM_NODEID")
[ -n "${ATOLL_KERNELS:-}" ] && args+=(--kernels "$ATOLL_KERNELS")
if [ "$SLURM_NODEID" != 0 ]; then
    seed=$(getent ahostsv4 "$first" | awk 'NR == 1 {print $1}')
    # The first machine may still be starting.
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/$seed/$port") 2>/dev/null && break
        sleep 0.2
    done
    args+=(--join "$seed:$port")
fi
exec "$atoll" "${args[@]}"
