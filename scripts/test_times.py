#!/usr/bin/env python3
"""Prints each test's time from ctest's JUnit file (ctest --output-junit), slowest first, and
their total: the place to look when the test command grows.

  scripts/test_times.py build/Testing/times.xml
  test times (s, slowest first; total 1520.3 s of 46 tests):
     412.0  test_online_run
     ...
"""
import sys
import xml.etree.ElementTree as ET


def main(argv):
    if len(argv) != 2:
        print("usage: scripts/test_times.py JUNIT_XML", file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"{argv[1]}: cannot read the test times: {e}", file=sys.stderr)
        return 1
    rows = []
    for case in root.iter("testcase"):
        try:
            seconds = float(case.get("time", "0"))
        except ValueError:
            seconds = 0.0
        status = "failed" if case.find("failure") is not None or case.find("error") is not None \
            else "skipped" if case.find("skipped") is not None else ""
        rows.append((seconds, case.get("name", "?"), status))
    rows.sort(key=lambda r: -r[0])
    total = sum(r[0] for r in rows)
    print(f"test times (s, slowest first; total {total:.1f} s of {len(rows)} tests):")
    for seconds, name, status in rows:
        print(f"  {seconds:7.1f}  {name}" + (f"  ({status})" if status else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
