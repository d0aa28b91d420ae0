# SPDX-License-Identifier: GPL-3.0-or-later
"""Print the two figures `make benchmark` reports, from the JSON files of benchmarks/rerun.py and
benchmarks/labels_rollout.py: the bring-up's rerun over its first run (per fleet size), and the naive per-node loop
over ours on the kwok nodes (same run). Figures only: nothing here passes or fails on a number."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rerun_lines(report: dict) -> list:
    out = []
    for size in report.get("sizes", []):
        runs = dict((r["run"], r) for r in size["runs"])
        first, changed = runs.get("first"), runs.get("changed")
        reruns = [r for r in size["runs"] if r["run"] == "rerun"]
        rerun = reruns[-1]
        line = ("rerun over first run of the bring-up, %d node containers: %.3f (first %.1f s, rerun %.1f s, the median of %s,"
                " with changed=%s" % (size["size"], size["rerun_over_first"], first["bringup_s"],
                                      size.get("rerun_median_s", rerun["bringup_s"]),
                                      ", ".join("%.1f" % r["bringup_s"] for r in reruns),
                                      "/".join(str(r["changed"]) for r in reruns)))
        if changed:
            line += "; after a change on %s the proof ran again on %s" % (changed.get("changed_node"),
                                                                          ", ".join(changed["proved"]) or "no node")
        out.append(line + "; load 1m %.1f-%.1f)" % (first["load_before"][0], rerun["load_after"][0]))
    return out


def rollout_lines(report: dict) -> list:
    summary = report.get("summary", {})
    if "naive_over_ours" not in summary:
        return ["naive over ours: not measured (only %s ran)" % ", ".join(k for k in summary)]
    return ["naive loop over ours, labels + rollout wait on %d kwok nodes (same run): %.1f (ours %.1f s, naive %.1f s, "
            "medians of %d run(s))" % (report["nodes"], summary["naive_over_ours"], summary["ours"]["median_total_s"],
                                       summary["naive"]["median_total_s"], summary["ours"]["runs"])]


def main(argv=None) -> int:
    lines = []
    for path in (argv if argv is not None else sys.argv[1:]):
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        lines += rerun_lines(report) if "sizes" in report else rollout_lines(report)
    for line in lines:
        print("benchmark: " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
