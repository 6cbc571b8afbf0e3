#!/usr/bin/env python3
"""ctest `missing_data`: the test executables run with their reference data folder pointed at an empty folder
(INFLIGHT_TEST_DATA) must fail cleanly: exit status 1 (doctest's failure), never a signal or a hang, and every
failing test case must name the missing file. Usage: check_missing_data.py EXECUTABLE[:DOCTEST_FILTER]...
"""
import os
import re
import subprocess
import sys
import tempfile

SEPARATOR = "=" * 79


def check(executable, doctest_args, empty):
    name = os.path.basename(executable)
    env = dict(os.environ, INFLIGHT_TEST_DATA=empty)
    try:
        run = subprocess.run([executable, "--no-colors", *doctest_args], env=env, capture_output=True,
                             text=True, errors="replace", timeout=600)
    except subprocess.TimeoutExpired:
        return [f"{name}: still running after 600 s"]
    output = run.stdout + run.stderr
    problems = []
    if run.returncode < 0:
        problems.append(f"{name}: killed by signal {-run.returncode}")
    elif run.returncode != 1:
        problems.append(f"{name}: exit status {run.returncode}, expected 1 (failed test cases)")
    # doctest prints a block per failure, between lines of '='; an exception thrown in a subcase gets two
    # blocks, the second with its message. The summary comes last.
    failures = {}  # test case -> its failure blocks
    for block in output.split(SEPARATOR):
        case = re.search(r"TEST CASE:\s*(.*)", block)
        if case and "ERROR" in block:
            failures.setdefault(case.group(1).strip(), []).append(block.strip())
    if not failures:
        problems.append(f"{name}: no test case failed for want of its data")
    for case, blocks in failures.items():
        if not any(empty in b for b in blocks):
            problems.append(f"{name}: the failure of '{case}' does not name a file under {empty}:\n" + "\n".join(blocks))
    if problems:
        problems.append(f"{name}: its output ends with:\n" + "\n".join(output.splitlines()[-15:]))
    else:
        print(f"{name}: {len(failures)} test cases failed, each naming its missing file")
    return problems


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    problems = []
    with tempfile.TemporaryDirectory(prefix="inflight-no-data-") as empty:
        for arg in sys.argv[1:]:
            executable, _, test_filter = arg.partition(":")
            problems += check(executable, [f"--test-case={test_filter}"] if test_filter else [], empty)
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
