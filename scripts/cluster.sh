#!/usr/bin/env bash
# A cluster of N atoll nodes on this machine, over loopback, with a CA and
# node certificates made for it: the way to try several machines on one.
#
#   bash scripts/cluster.sh start N [KERNELS]   start nodes n0..nN-1 (n0 first,
#                                               the others join through it)
#   bash scripts/cluster.sh stop                stop them
#
# Everything lives in $ATOLL_CLUSTER_DIR (default target/cluster): ca/ (the
# CA and the node identities), nK.sock (node K's control socket), nK.log.
# Use node K with ATOLL_SOCKET=$ATOLL_CLUSTER_DIR/nK.sock atoll ps (or run,
# migrate, kill): any node sees and moves every node's processes. n0 also
# serves the dashboard on a free loopback port: its URL is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
atoll=${ATOLL:-$PWD/target/release/atoll}
dir=${ATOLL_CLUSTER_DIR:-$PWD/target/cluster}

stop() {
    if [ -f "$dir/pids" ]; then
        while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$dir/pids"
        rm -f "$dir/pids"
    fi
}

start() {
    local n=$1 kernels=${2:-2}
    [ -x "$atoll" ] || { echo "cluster: build atoll first (cargo build --release)" >&2; exit 1; }
    stop
    mkdir -p "$dir"
    rm -rf "$dir/ca"
    "$atoll" ca init "$dir/ca" >/dev/null
    local join=() http=(--http 127.0.0.1:0)
    for ((i = 0; i < n; i++)); do
        "$atoll" ca issue "$dir/ca" "n$i" >/dev/null
        rm -f "$dir/n$i.log"
        ATOLL_SOCKET="$dir/n$i.sock" "$atoll" node --kernels "$kernels" --no-pin \
            --listen 127.0.0.1:0 --certs "$dir/ca" --name "n$i" "${join[@]}" "${http[@]}" \
            2>"$dir/n$i.log" &
        echo $! >>"$dir/pids"
        # Wait until it is linked, then learn its address for the next.
        local addr=
        for _ in $(seq 600); do
            addr=$(sed -n 's/.*linked at \([^ ]*\) .*/\1/p' "$dir/n$i.log")
            [ -n "$addr" ] && break
            kill -0 "$(tail -n1 "$dir/pids")" 2>/dev/null || { cat "$dir/n$i.log" >&2; exit 1; }
            sleep 0.1
        done
        [ -n "$addr" ] || { echo "cluster: n$i did not start" >&2; exit 1; }
        until ATOLL_SOCKET="$dir/n$i.sock" "$atoll" ps >/dev/null 2>&1; do sleep 0.1; done
        echo "n$i: node $i at $addr, ATOLL_SOCKET=$dir/n$i.sock"
        local url
        url=$(sed -n 's/^atoll: dashboard at //p' "$dir/n$i.log")
        [ -z "$url" ] || echo "n$i: dashboard at $url"
        http=()
        [ ${#join[@]} -gt 0 ] || join=(--join "$addr")
    done
}

case "${1:-}" in
start) start "${2:?how many nodes?}" "${3:-}" ;;
stop) stop ;;
*)
    echo "usage: $0 start N [KERNELS] | stop" >&2
    exit 2
    ;;
esac
