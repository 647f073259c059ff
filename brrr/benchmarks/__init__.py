"""Benchmark scripts shared by the notebooks and the command line: ``python -m brrr.benchmarks.<name>``."""
