#!/usr/bin/env bash
# Coverage-guided fuzzing of one of atoll's fuzz targets (crates/fuzz) with
# libFuzzer, on stable Rust.
#
#   bash scripts/fuzz.sh TARGET [SECONDS] [libFuzzer options...]
#
# TARGET is image, frames, module or generated; SECONDS (default 60) how
# long to run. The corpus grows from run to run in target/fuzz/corpus/TARGET
# (a first run starts from the target's seeds); an input that fails is kept
# in target/fuzz/artifacts/TARGET/ and is replayed by passing its path as
# the corpus: `target/fuzz/build/*/release/fuzz-TARGET FILE`.
#
# CI does not run this: it runs every target briefly through proptest
# (crates/fuzz/tests/targets.rs). The first build instruments the whole
# dependency tree in a target directory of its own, several minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: bash scripts/fuzz.sh image|frames|module|generated [SECONDS] [libFuzzer options]"
target=${1:?$usage}
case $target in
    image | frames | module | generated) ;;
    *) echo "$usage" >&2; exit 2 ;;
esac
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))

# What cargo-fuzz passes, less the sanitizer (which needs a nightly
# compiler): LLVM's coverage counters, their table and comparison tracing,
# which libFuzzer reads; and debug assertions and overflow checks, so that
# arithmetic that wraps is a finding too. `--target` keeps the flags off
# build scripts and procedural macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR=target/fuzz/build
triple=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --locked -p atoll-fuzz --bins --target "$triple"

corpus=target/fuzz/corpus/$target
artifacts=target/fuzz/artifacts/$target/
mkdir -p "$artifacts"
exec "$CARGO_TARGET_DIR/$triple/release/fuzz-$target" "$corpus" \
    -max_total_time="$seconds" -timeout=60 -artifact_prefix="$artifacts" \
    -print_final_stats=1 "$@"
