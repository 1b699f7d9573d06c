#!/usr/bin/env bash
# Runs the official WASI conformance suite (WebAssembly/wasi-testsuite) on
# atoll through the suite's own runner and records the result.
#
#   bash scripts/wasi-testsuite.sh SUITE [--record DIR]
#
# SUITE is a checkout of the suite's `prod/testsuite-base` branch (it carries
# the prebuilt tests); it is not part of atoll and CI does not run it
# (tests/guests/wasi_conformance.c holds atoll's own regressions):
#
#   git clone --branch prod/testsuite-base https://github.com/WebAssembly/wasi-testsuite
#
# Every wasm32-wasip1 test runs in each configuration: a node with one kernel
# per core; started on each kernel of a 3-kernel node; moved to the next
# kernel after every system call (--wander) by hand-over and by copy; and
# with ERRNO_MODE_UNIX=1, where the Rust tests demand Linux's exact errno
# values rather than any of the accepted ones. If `wasmtime` is on PATH, the
# suite's wasmtime adapter runs too, for comparison.
#
# Needs Python 3.12 or newer (the runner's requirement); its packages are
# installed into a virtual environment under target/. --record DIR writes
# DIR/wasi-testsuite.md and DIR/wasi-testsuite.json.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

usage() {
    echo "usage: $0 SUITE [--record DIR]" >&2
    exit 2
}
[ $# -ge 1 ] || usage
suite=$(cd "$1" && pwd)
shift
record=""
while [ $# -gt 0 ]; do
    case "$1" in
    --record) record=${2:?--record needs a directory}; shift 2 ;;
    *) usage ;;
    esac
done
[ -x "$suite/run-tests" ] || { echo "$suite: not a wasi-testsuite checkout (no run-tests)" >&2; exit 1; }

python=""
for p in python3.13 python3.12 python3 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python; do
    if command -v "$p" >/dev/null 2>&1 &&
        "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        python=$p
        break
    fi
done
[ -n "$python" ] || { echo "the suite's runner needs Python 3.12 or newer" >&2; exit 1; }
venv=$root/target/wasi-testsuite-venv
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q -r "$suite/test-runner/requirements.txt"
fi

export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -q -p atoll-cli
export ATOLL=$root/target/release/atoll
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME [VAR=VALUE...]: one pass of the suite, results in $out/NAME.json.
run() {
    local name=$1
    shift
    echo "$name" >>"$out/order"
    echo "== $name" >&2
    (cd "$suite" && env "$@" "$venv/bin/python" ./run-tests --disable-colors \
        --runtime-adapter "${ADAPTER:-$root/tests/wasi-testsuite/atoll.py}" \
        --json-output-location "$out/$name.json" >"$out/$name.log" 2>&1) || true
    tail -n 1 "$out/$name.log" >&2
}

run default
for k in 0 1 2; do
    run "kernel $k of 3" ATOLL_KERNELS=3 ATOLL_ON=$k
done
run "wander, hand-over" ATOLL_KERNELS=3 ATOLL_WANDER=1 ATOLL_MIGRATE_MODE=handover
run "wander, copy" ATOLL_KERNELS=3 ATOLL_WANDER=1 ATOLL_MIGRATE_MODE=copy
run "Linux errno values" ATOLL_RUST_ENV=ERRNO_MODE_UNIX=1
if command -v wasmtime >/dev/null; then
    ADAPTER=$suite/adapters/wasmtime.py run "wasmtime $(wasmtime --version | awk '{print $2}')"
fi

suite_commit=$(git -C "$suite" rev-parse --short HEAD 2>/dev/null || echo unknown)
"$venv/bin/python" tests/wasi-testsuite/record.py "$out" "$suite_commit" ${record:+"$record"}
