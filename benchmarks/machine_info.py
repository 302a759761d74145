"""What the benchmark scripts print about the machine they ran on (their figures are recorded with it)."""

from __future__ import annotations

import platform

__all__ = ["cpu_name", "load_average"]


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
