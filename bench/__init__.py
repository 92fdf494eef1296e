"""Benchmarks for ctxsim stages (``python -m bench.bench_<stage> [--quick]``)."""
