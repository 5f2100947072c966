#!/usr/bin/env python3
"""Print a benchmark_summary.csv as a Markdown table (for the docs).

    python3 benchmarks/summarize_csv.py results/benchmark_summary.csv
"""
import csv
import sys

COLUMNS = [("mode", "mode"), ("precision", "precision"), ("nhwc", "NHWC"),
           ("compile", "compile"), ("global_batch_size", "batch"), ("world_size", "GPUs"),
           ("throughput_img_s", "img/s"), ("median_ms", "median ms"), ("p99_ms", "p99 ms"),
           ("cv", "CV"), ("peak_allocated_mb", "peak alloc MB"), ("compile_s", "compile s")]


def main(path: str) -> None:
    rows = list(csv.DictReader(open(path)))
    print("| " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in rows:
        cells = []
        for key, _ in COLUMNS:
            value = row.get(key, "")
            if key == "cv" and value:
                value = f"{float(value):.1%}"
            elif key in ("throughput_img_s", "median_ms", "p99_ms", "peak_allocated_mb",
                         "compile_s") and value:
                value = f"{float(value):.1f}" if key != "median_ms" and key != "p99_ms" \
                    else f"{float(value):.2f}"
            cells.append(value)
        print("| " + " | ".join(cells) + " |")
    if rows:
        print(f"\n{rows[0]['device_name']}, PyTorch {rows[0]['torch']}, {rows[0]['gpu_runtime']}")


if __name__ == "__main__":
    main(sys.argv[1])
