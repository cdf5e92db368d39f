#!/usr/bin/python3
"""How much of a model an engine claims, from `tessera partition MODEL --backends ENGINE,native --placement priority
--json` (a file, or stdin when the argument is -).

Usage: coverage.py PARTITION_JSON ENGINE
Prints one tab-separated line: claimed nodes, total nodes, the engine's regions, and its refusals ("NODE: reason"
joined by "; ", or "-"). Exit 2 when the file is not a partition report.
"""

import json
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, engine = sys.argv[1], sys.argv[2]
    try:
        with (sys.stdin if path == "-" else open(path)) as f:
            report = json.load(f)
        regions = report["regions"]
        total = int(report["num_nodes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"coverage: {path}: not a partition report: {e}", file=sys.stderr)
        return 2
    mine = [r for r in regions if r.get("backend") == engine]
    claimed = sum(int(r.get("num_nodes", len(r.get("nodes", [])))) for r in mine)
    refusals = []
    for r in report.get("refusals", []):
        if r.get("backend") != engine:
            continue
        reason = " ".join(str(r.get("reason", "?")).split())
        refusals.append(f"{','.join(r.get('nodes', []))}: {reason}")
    print(f"{claimed}\t{total}\t{len(mine)}\t{'; '.join(refusals) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
