"""What the benchmark scripts share: the command line around a module's `run()`."""

from __future__ import annotations

import argparse


def script_main(run, description: str, table: str):
    """A `main(argv)` for a benchmark module: `--json PATH`, then `run(json_path)`; exits 1
    when any top-level key or any row of `results[table]` reports an error."""

    def main(argv=None) -> int:
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--json", help="write the results to this file")
        args = parser.parse_args(argv)
        results = run(args.json)
        failed = any(k.endswith("error") for k in results) or any(
            "error" in row for row in results.get(table, {}).values())
        return 1 if failed else 0

    return main
