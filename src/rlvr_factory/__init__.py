"""RLVR Factory: data curation, SFT, rollouts, verification, RL updates and evaluation as Kedro pipelines.

Importing the package turns on huge pages for PyTorch's large CPU allocations (`THP_MEM_ALLOC_ENABLE=1`,
unless the environment sets it). PyTorch reads the variable once, at the process's first tensor allocation,
so it is set here, before any module of the project allocates one: `kedro run`, `rlvr`, the tests and a
notebook that imports the project all get it. Every fresh tensor of 2 MiB or more then gets its pages
from the kernel in 2 MiB pieces instead of 4 KiB ones, each zeroed on first touch; with 4 KiB pages a CPU
run that sampled with transformers' concatenating KV cache spent more time in page faults than in its matrix
products (`benchmarks/cpu_allocator.py`: 1.5-1.9x faster sampling on the 2-core machine; the engine's own
in-place cache, `rollout/hf.py`, removes most of those allocations on top). Set
`THP_MEM_ALLOC_ENABLE=0` to keep PyTorch's default.
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

HUGE_PAGE_PROBE_BYTES = 48 << 20  # above glibc's largest mmap threshold (32 MiB): always fresh pages from the kernel


def cpu_huge_pages() -> bool | None:
    """Whether PyTorch's large CPU allocations get huge pages in this process, measured: the minor page
    faults of writing a fresh 48 MiB tensor (~12,000 with 4 KiB pages, ~24 with 2 MiB ones). None where it
    cannot be measured (not Linux) or the kernel has transparent huge pages off."""
    import resource

    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return None
    except OSError:
        return None
    import torch

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    probe = torch.empty(HUGE_PAGE_PROBE_BYTES // 4, dtype=torch.float32)
    probe.fill_(1.0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del probe
    return faults < HUGE_PAGE_PROBE_BYTES // 4096 // 8
