"""Benchmark folders: discovery, description and preparation behind ng_list_benchmarks and ng_prepare_benchmark.

A benchmark is a folder `benchmarks/<name>/` with `config.yaml` (environment and agent instances, dataset entries)
and `prepare.py` (`prepare(output_dir, **options) -> Path` writes the dataset). `sources` holds what the
benchmarks' prepare.py files share for reading public dataset files and writing rows.
"""

from nemo_gym.benchmark_layout.describe import BenchmarkInfo, DatasetInfo, describe
from nemo_gym.benchmark_layout.discover import Benchmark, benchmark_holding, find_benchmark, find_benchmarks
from nemo_gym.benchmark_layout.preparation import PreparedFile, count_valid_rows, prepare_benchmark

__all__ = [
    "Benchmark",
    "BenchmarkInfo",
    "DatasetInfo",
    "PreparedFile",
    "benchmark_holding",
    "count_valid_rows",
    "describe",
    "find_benchmark",
    "find_benchmarks",
    "prepare_benchmark",
]
