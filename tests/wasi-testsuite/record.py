"""Summarizes the wasi-testsuite runs of scripts/wasi-testsuite.sh.

    record.py RUNS_DIR SUITE_COMMIT [RECORD_DIR]

RUNS_DIR holds `order` (one configuration name a line) and, for each, the
runner's `NAME.json`. Prints a Markdown table; with RECORD_DIR, also writes
RECORD_DIR/wasi-testsuite.md and RECORD_DIR/wasi-testsuite.json. Exits 1 when
a configuration did not pass every test it ran.
"""

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

LANGUAGES = [("C", "WASI C tests"), ("Rust", "WASI Rust tests"),
             ("AssemblyScript", "WASI AssemblyScript tests")]
VERSION = "[wasm32-wasip1]"


def machine() -> str:
    """The same description as atoll's benchmarks give."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    gib = round(mem_kib / 1048576, 1)
    return f"{cpu}, {os.cpu_count()} cores, {gib} GiB, Linux {platform.release()}"


def summarize(run: dict) -> dict:
    """Passed and total per language, and the failures with their messages."""
    row = {"languages": {}, "failures": [], "durations_s": []}
    for language, prefix in LANGUAGES:
        suite = next((s for s in run["results"]
                      if s["name"] == f"{prefix} {VERSION}"), None)
        if suite is None:
            continue
        executed = [t for t in suite["tests"] if t["executed"]]
        passed = [t for t in executed if t["outcome"] == "pass"]
        row["languages"][language] = {"passed": len(passed), "total": len(executed)}
        row["durations_s"] += [t["duration_s"] for t in executed]
        for t in executed:
            if t["outcome"] != "pass":
                why = "; ".join(m.strip().splitlines()[0]
                                for m in t["failures"] if m.strip())
                row["failures"].append({"test": f"{language}/{t['name']}",
                                        "outcome": t["outcome"], "why": why})
    return row


def main() -> int:
    runs_dir = Path(sys.argv[1])
    suite_commit = sys.argv[2]
    record = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    names = (runs_dir / "order").read_text().splitlines()
    rows = {}
    for name in names:
        path = runs_dir / f"{name}.json"
        if not path.exists():
            print(f"{name}: the runner wrote no results; see its log", file=sys.stderr)
            return 1
        rows[name] = summarize(json.loads(path.read_text()))

    atoll_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()
    lines = [
        "# wasi-testsuite",
        "",
        "The official WASI conformance suite (WebAssembly/wasi-testsuite, branch",
        f"`prod/testsuite-base` at {suite_commit}), its wasm32-wasip1 tests run by",
        "the suite's own runner through `tests/wasi-testsuite/atoll.py`.",
        "",
        "Command: `bash scripts/wasi-testsuite.sh SUITE --record bench/results`",
        "",
        f"Machine: {machine()}; atoll at {atoll_commit}",
        "",
        "| configuration | " + " | ".join(l for l, _ in LANGUAGES)
        + " | all | median ms per test |",
        "|---|" + "---:|" * (len(LANGUAGES) + 2),
    ]
    failed = False
    for name, row in rows.items():
        cells, passed, total = [], 0, 0
        for language, _ in LANGUAGES:
            got = row["languages"].get(language)
            if got is None:
                cells.append("—")
                continue
            cells.append(f"{got['passed']}/{got['total']}")
            passed += got["passed"]
            total += got["total"]
        failed |= passed != total
        median = statistics.median(row["durations_s"]) * 1000 if row["durations_s"] else 0
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {passed}/{total} | {median:.1f} |")
    lines += [
        "",
        "Configurations: `default` is a node with one kernel per core; `kernel K",
        "of 3` starts every test on kernel K; `wander` moves the test to the next",
        "kernel after every system call answered in place (`atoll run --wander`),",
        "by hand-over or by copy, so consecutive calls run on different kernels;",
        "`Linux errno values` sets ERRNO_MODE_UNIX=1, under which the Rust tests",
        "demand Linux's exact errno where they otherwise accept any of several.",
        "A `wasmtime` row, when present, is the suite's own wasmtime adapter in",
        "the same run. A test's time is the runner's, from starting the runtime",
        "to its exit: for atoll it includes starting a node and its kernels, and",
        "for `wander` every move.",
        "",
    ]
    failures = [(name, f) for name, row in rows.items() for f in row["failures"]]
    if failures:
        lines += ["## Failures", "", "| configuration | test | outcome | why |",
                  "|---|---|---|---|"]
        lines += [f"| {n} | {f['test']} | {f['outcome']} | {f['why']} |"
                  for n, f in failures]
    else:
        lines += ["No expected failures: every test passes in every configuration."]
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        record.mkdir(parents=True, exist_ok=True)
        (record / "wasi-testsuite.md").write_text(text)
        data = {"suite_commit": suite_commit, "atoll_commit": atoll_commit,
                "machine": machine(), "configurations": rows}
        (record / "wasi-testsuite.json").write_text(json.dumps(data, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
