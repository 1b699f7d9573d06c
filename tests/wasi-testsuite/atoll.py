"""wasi-testsuite adapter for atoll.

The official WASI conformance suite (WebAssembly/wasi-testsuite, branch
`prod/testsuite-base`) drives a runtime through a file like this one:

    ./run-tests --runtime-adapter /path/to/atoll/tests/wasi-testsuite/atoll.py

`scripts/wasi-testsuite.sh` does that for every mode and records the result.
Environment:

    ATOLL          the atoll binary [default: atoll on PATH]
    ATOLL_KERNELS  kernels of the embedded node [default: one per core]
    ATOLL_ON       kernel index to start each test on [default: the node's choice]
    ATOLL_WANDER   if set, the test moves to the next kernel after every
                   system call (`atoll run --wander`), proving that the state
                   of its files and directories lives in the UArea
    ATOLL_MIGRATE_MODE  how it moves: handover [default] or copy
    ATOLL_RUST_ENV      KEY=VALUE pairs (space-separated) added to the
                        environment of the Rust tests, which read their
                        configuration from it: ERRNO_MODE_UNIX=1 makes them
                        demand Linux's exact errno values (the other
                        languages' tests check their whole environment)
"""

import os
import shlex
import subprocess
from typing import Dict, List, Optional, Tuple

ATOLL = shlex.split(os.getenv("ATOLL", "atoll"))


def get_name() -> str:
    return "atoll"


def get_version() -> str:
    result = subprocess.run(ATOLL + ["--version"], encoding="UTF-8",
                            capture_output=True, check=True)
    return result.stdout.split()[1]


def get_wasi_versions() -> List[str]:
    return ["wasm32-wasip1"]


def get_wasi_worlds() -> List[str]:
    return ["wasi:cli/command"]


def get_timeout_seconds() -> float:
    # A module's first run includes `atoll prepare` (binaryen's Asyncify)
    # and compilation; later runs hit the cache.
    return 120.0


def compute_argv(test_path: str,
                 args_env_root: Tuple[List[str], Dict[str, str], Optional[str]],
                 proposals: List[str],
                 wasi_world: str,
                 wasi_version: str) -> List[str]:
    args, env, root = args_env_root
    argv = ATOLL + ["run", "--embedded"]
    if os.getenv("ATOLL_KERNELS"):
        argv += ["--kernels", os.environ["ATOLL_KERNELS"]]
    if os.getenv("ATOLL_ON"):
        argv += ["--on", os.environ["ATOLL_ON"]]
    if os.getenv("ATOLL_WANDER"):
        argv += ["--wander"]
    if os.getenv("ATOLL_MIGRATE_MODE"):
        argv += ["--migrate-mode", os.environ["ATOLL_MIGRATE_MODE"]]
    if "/rust/" in test_path:
        for pair in os.getenv("ATOLL_RUST_ENV", "").split():
            argv += ["--env", pair]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    if root:
        argv += ["--dir", f"{root}::/"]
    return argv + [test_path] + args
