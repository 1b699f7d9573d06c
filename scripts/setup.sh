#!/usr/bin/env bash
# Installs what atoll needs on a Debian machine, and checks the Rust toolchain.
#
#   clang-16, lld-16, wasi-libc, libclang-rt-16-dev-wasm32  C programs -> wasm32-wasi
#   llvm-16                                                  llvm-ar-16: the guest MPI library (libatollmpi.a)
#   libclang1-16, linux-libc-dev                             the userfaultfd crate's bindings (bindgen, <linux/userfaultfd.h>)
#   binaryen                                                 wasm-opt (Asyncify) for `atoll prepare`
#   gcc, make, libc6-dev                                     native comparison programs, the Makefile
#   fonts-dejavu-core                                        the font of the benchmark charts (PNG)
#   iproute2                                                 `ip netns`: cluster tests on separate hosts; `tc`: the 10 Gbit/s link of `atoll bench cluster`
#   openmpi-bin, libopenmpi-dev                              `atoll bench mpi`: the same MPI C sources natively
#   libblas-dev                                              Debian's reference BLAS, for the native HPL
#   curl, ca-certificates, xz-utils                          the Makefile fetches HPCC's, bzip2's and QuickJS's sources from Debian
#   chromium-headless-shell                                  the dashboard's tests drive a real browser
#
# Safe to run again: it installs only what is missing. Needs root (or sudo)
# only when something is missing.
set -euo pipefail

packages=(clang-16 libclang1-16 linux-libc-dev lld-16 llvm-16 wasi-libc libclang-rt-16-dev-wasm32 binaryen gcc make libc6-dev fonts-dejavu-core iproute2 openmpi-bin libopenmpi-dev libblas-dev curl ca-certificates xz-utils chromium-headless-shell)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
        echo "setup: run as root (or install sudo) to install: ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust: wasmtime 48 needs Rust 1.95 (rustup's stable; Debian's is too old).
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    echo "setup: cargo not found: install Rust 1.95 or newer (https://rustup.rs)" >&2
    exit 1
fi
version=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n' 1.95.0 "$version" | sort -V | head -n1)" != 1.95.0 ]; then
    echo "setup: rustc $version is too old: atoll needs 1.95 or newer" >&2
    exit 1
fi
