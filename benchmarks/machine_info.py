"""What the benchmark scripts print about the machine they ran on (their figures are recorded with it), and the
measured limit they are set against: one core's matrix-product peak in float32 and bf16 (issue 26)."""

from __future__ import annotations

import platform
import time

import torch

from contrastive_hf.models.precision import BF16_UNITS, cpu_bf16_units

__all__ = [
    "PEAK_SHAPE",
    "SMOKE_PEAK_SHAPE",
    "cpu_name",
    "load_average",
    "bf16_flags",
    "matmul_peak",
    "machine_lines",
    "encoder_flops",
]

# The product whose rate is the peak: (1024 x 384) @ (384 x 1536), the shape of a MiniLM feed-forward layer over
# 1,024 tokens (hidden 384, intermediate 1536), as issue 26 measured it.
PEAK_SHAPE = (1024, 384, 1536)
# A smoke run's product: the same code in a fraction of a second, also where bf16 has no matrix unit (emulated bf16
# runs the peak's product at about 1 GFLOP/s on a 2-core AMD EPYC: 12 s for its two peaks)
SMOKE_PEAK_SHAPE = (64, 384, 384)


def cpu_name() -> str:
    """The processor's model name from /proc/cpuinfo (else what `platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> str:
    """The 1, 5 and 15-minute load averages: how busy the shared machine was around a measurement."""
    try:
        with open("/proc/loadavg", encoding="utf-8") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "n/a"


def bf16_flags() -> str:
    """The CPU's bf16 and matrix flags from /proc/cpuinfo (``amx_bf16 amx_tile avx512_bf16 ...``), or ``none``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        flags = []
    shown = sorted(flag for flag in flags if "bf16" in flag or flag.startswith("amx") or flag == "avx512f")
    return " ".join(shown) or "none"


def matmul_peak(dtype: torch.dtype, seconds: float = 1.0, shape: tuple[int, int, int] = PEAK_SHAPE) -> float:
    """FLOP/s of one thread on the ``shape`` product (`PEAK_SHAPE`) in ``dtype``, by the process's CPU time: the best
    of repeated timings of 10 products each (the peak the hardware gives a product of that shape)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows, inner, columns = shape
        generator = torch.Generator().manual_seed(0)
        left = torch.randn(rows, inner, generator=generator).to(dtype)
        right = torch.randn(inner, columns, generator=generator).to(dtype)
        for _ in range(3):  # warm-up: oneDNN builds its kernel at the first call
            left @ right
        best, start = float("inf"), time.process_time()
        while time.process_time() - start < seconds:
            begin = time.process_time()
            for _ in range(10):
                left @ right
            best = min(best, (time.process_time() - begin) / 10)
        return 2 * rows * inner * columns / best
    finally:
        torch.set_num_threads(threads)


def machine_lines(seconds: float = 1.0, smoke: bool = False) -> tuple[list[str], dict[str, float]]:
    """The lines that name the machine and its measured peaks, and the peaks (FLOP/s) by precision name
    (``fp32``, ``bf16``); a smoke run measures them on `SMOKE_PEAK_SHAPE` (its figures mean nothing)."""
    shape = SMOKE_PEAK_SHAPE if smoke else PEAK_SHAPE
    peaks = {
        name: matmul_peak(dtype, seconds, shape) for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    unit = cpu_bf16_units()
    lines = [
        f"machine: {cpu_name()}; bf16 flags: {bf16_flags()}; bf16 matrix unit used: {unit or 'none'} "
        f"(of {', '.join(BF16_UNITS)})",
        f"peak of one core, {shape[0]}x{shape[1]} @ {shape[1]}x{shape[2]}, by CPU time: fp32 "
        f"{peaks['fp32'] / 1e9:.0f} GFLOP/s, bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s "
        f"({peaks['bf16'] / peaks['fp32']:.2f}x)",
    ]
    return lines, peaks


def encoder_flops(config, lengths, passes: int = 1) -> float:
    """FLOPs of ``passes`` passes of a BERT-like encoder over sentences of the given real-token ``lengths``.

    Counted (2 FLOPs per multiply-add, real tokens only, as packed attention computes them): per token and layer the
    dense products, ``2 * (4 h^2 + 2 h i)`` (query, key, value and output projections; the feed-forward's two
    products), and attention's two products within its own sentence, ``2 * 2 * n * h`` for a sentence of ``n``
    tokens. Not counted: embeddings (lookups), layer norms, GELU, softmax, pooling and the loss (a few percent).
    A training step is ``passes=3`` (the backward pass costs twice the forward), an encoding ``passes=1``.
    """
    hidden, intermediate, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    dense = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    total = sum(n * dense + 4 * n * n * hidden for n in lengths)
    return passes * layers * total
