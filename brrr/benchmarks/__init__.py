"""Benchmark scripts: each holds one chapter's performance targets and measures them in one run.

| module              | what it measures                                                  |
|---------------------|-------------------------------------------------------------------|
| compute             | matmul throughput, the FLOPs-vs-runtime table: ``python -m
brrr.benchmarks.compute`` | | overhead            | overhead, batch doubling, CUDA graphs: ``python
-m brrr.benchmarks.overhead`` | | fusion              | the fusion targets: ``python -m
brrr.benchmarks.fusion``          | | compiling           | ``torch.compile`` for timing: compiled
once, outside the timing  | | repeat_sweep        | the essay's ``x = x * 2`` repeat sweep and its
knee               | | rematerialization   | peak memory and step time with saved vs recomputed
activations    |

Targets are ratios measured in the same run (a speedup over a baseline timed
seconds earlier, or a fraction of a ceiling measured in the same run), never
absolute times, so they mean the same on a laptop and on an H100. The notebooks
import the same workloads and helpers, so what a notebook prints and what the
benchmark checks come from one piece of code.
"""
