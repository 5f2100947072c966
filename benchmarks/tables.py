"""Print the rows of a benchmark_summary.csv as Markdown tables for docs/results.md: one table
for training and inference (with tokens/s, phases, MFU), one for generation.

    python3 -m benchmarks.tables results/benchmark_summary.csv
"""
import csv
import sys

TRAINING = [("network", "network"), ("mode", "mode"), ("precision", "precision"),
            ("nhwc", "NHWC"), ("compile", "compile"), ("attention", "attention"), ("seq_len", "seq"),
            ("global_batch_size", "batch"), ("world_size", "GPUs"),
            ("throughput_img_s", "items/s"), ("throughput_tokens_s", "tokens/s"),
            ("median_ms", "median ms"), ("cv", "CV"), ("forward_ms", "fwd ms"),
            ("backward_ms", "bwd ms"), ("optimizer_ms", "opt ms"), ("mfu", "MFU"),
            ("peak_allocated_mb", "peak MB"), ("compile_s", "compile s"), ("status", "status")]
GENERATION = [("network", "network"), ("compile", "compile"), ("global_batch_size", "batch"),
              ("ttft_median_ms", "TTFT ms"), ("itl_median_ms", "ITL median ms"),
              ("itl_p99_ms", "ITL p99 ms"), ("throughput_tokens_s", "tokens/s"),
              ("peak_allocated_mb", "peak MB"), ("compile_s", "compile s")]
PERCENT = {"cv", "mfu"}


def cell(key: str, value: str) -> str:
    if not value:
        return ""
    if key in PERCENT:
        return f"{float(value):.1%}"
    if value.lstrip("-").isdigit():
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:.2f}" if abs(number) < 100 else f"{number:.0f}"


def table(rows: list[dict], columns) -> None:
    print("| " + " | ".join(title for _, title in columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(cell(key, row.get(key, "")) for key, _ in columns) + " |")
    print()


def main(path: str) -> None:
    rows = list(csv.DictReader(open(path)))
    generation = [row for row in rows if row["mode"] == "generate"]
    other = [row for row in rows if row["mode"] != "generate"]
    for chosen, columns in ((other, TRAINING), (generation, GENERATION)):
        if chosen:
            table(chosen, columns)
    if rows:
        print(f"{rows[0]['device_name']}, PyTorch {rows[0]['torch']}, {rows[0]['gpu_runtime']}")


if __name__ == "__main__":
    main(sys.argv[1])
