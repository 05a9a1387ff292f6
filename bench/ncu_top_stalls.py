"""Reads ncu's source page as CSV (`ncu --import R --page source --print-source sass --csv`) on
stdin and prints the SASS lines with the most warp stall samples, for bench/gpu_profile.sh.

    python3 bench/ncu_top_stalls.py [COUNT]
"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    lines = sys.stdin.read().splitlines()
    start = next((i for i, line in enumerate(lines) if "Warp Stall Sampling" in line), None)
    if start is None:
        print("no 'Warp Stall Sampling' column in ncu's source page; its first lines:")
        print("\n".join(lines[:8]))
        return
    rows = list(csv.DictReader(lines[start:]))
    samples = next(c for c in rows[0] if "Warp Stall Sampling (All" in c)
    source = next((c for c in rows[0] if c in ("Source", "# Source")), list(rows[0])[1])
    total = sum(number(r[samples]) for r in rows) or 1.0
    # Per-reason columns, where this ncu version gives them (names with "stall").
    reasons = [c for c in rows[0] if "stall" in c.lower() and "Sampling" not in c]
    print(f"{total:.0f} samples; columns: {samples!r}")
    for r in sorted(rows, key=lambda r: -number(r[samples]))[:count]:
        top = sorted(((number(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c} {v:.0f}" for v, c in top if v > 0)
        print(f"{100 * number(r[samples]) / total:5.1f}%  {r[source].strip()[:90]}  {why}")


if __name__ == "__main__":
    main()
