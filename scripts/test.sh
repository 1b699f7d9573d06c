#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test:
# unit tests, and integration tests that start real nodes and kernels and
# run real C programs compiled to WebAssembly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
make -s all
# --all-targets: the features of the tests' dependencies, as `cargo test` uses
# them, so that the two share one build (one wasmtime, not two).
cargo build --release --workspace --all-targets --locked
cargo test --release --workspace --locked
