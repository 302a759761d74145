"""Which precision a model computes in: bf16 where the processor computes bf16 matrix products natively (a CPU with
bf16 matrix instructions, a GPU of compute capability 8.0 or later), float32 elsewhere.

Training (`training_precision`, the default of ``ContrastiveTrainingArguments.bf16``) and `encode`
(`encoding_precision`) run under bf16 autocast with float32 master weights where it pays: on a CPU with bf16 matrix
instructions, the matrix products (nearly all of an encoder's work) run at 2.3x (AVX-512 BF16) to 9x (AMX) the float32
rate, and the trained and encoded results stay at float32's quality (docs/benchmarks.md, issue 26: STS-B dev after
the demo's training within 0.3 of float32 over 3 seeds, the STS suite within 0.3, embeddings within cosine 0.999).
Similarities, logits and losses stay in float32 under autocast (`losses.loss_dtype`), and the weights a run saves are
its float32 master weights.

`cpu_bf16_units` tells which instructions the CPU has, distinguishing Intel's AMX tiles (Xeon 4th generation,
Sapphire Rapids, and later: flag ``amx_bf16``), AVX-512 BF16 dot products (Intel Cooper Lake, AMD Zen 4 and later:
``avx512_bf16``) and neither, where bf16 is emulated in float32 arithmetic and slower than float32 itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "BF16_UNITS",
    "Precision",
    "cpu_bf16_units",
    "gpu_bf16_native",
    "NATIVE_BF16_COMPUTE_CAPABILITY",
    "training_precision",
    "encoding_precision",
    "log_precision_once",
]

# The CPU features that compute bf16 matrix products natively, best first, by their /proc/cpuinfo flag names. bf16
# is the default on both: AVX-512 BF16 measured on an AMD EPYC (Zen 4) in docs/benchmarks.md, AMX on an Intel Xeon
# in issue 26 (a 1024x384x1536 product 9x faster than float32, a training step 1.7x under plain autocast).
BF16_UNITS = ("amx_bf16", "avx512_bf16")

# oneDNN computes the matrix products, and ONEDNN_MAX_CPU_ISA caps the instructions it may use (its levels, lowest
# first: ... AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_FP16 = AVX10_1_512, then the AMX levels): a
# cap below a unit leaves bf16 emulated, as on a CPU without it (and measures such a CPU on one with it).
_ISA_LEVELS_WITH_AVX512_BF16 = ("BF16", "FP16", "AVX10", "AMX")


@dataclass(frozen=True)
class Precision:
    """A precision decision: ``bf16`` (autocast to bfloat16, float32 master weights) or not, and why, in words."""

    bf16: bool
    reason: str

    @property
    def name(self) -> str:
        return "bf16 autocast" if self.bf16 else "float32"

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager:
        """The autocast context of this decision on ``device`` (nothing when not bf16)."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def _cpuinfo_flags() -> set[str] | None:
    """The CPU's feature flags as the Linux kernel lists them (None where there is no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return set()


def _torch_probed_units() -> str | None:
    """The units torch's own instruction-set probes find (where there is no /proc/cpuinfo); private functions of
    ``torch.cpu``, so each is asked only when present."""
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return "amx_bf16"  # every CPU with AMX tiles has AMX-BF16
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "avx512_bf16"
    return None


@functools.cache
def cpu_bf16_units() -> str | None:
    """``"amx_bf16"``, ``"avx512_bf16"`` or None: the best bf16 matrix instructions this CPU offers the matrix
    products (`BF16_UNITS`), less what ``ONEDNN_MAX_CPU_ISA`` rules out."""
    flags = _cpuinfo_flags()
    if flags is None:
        unit = _torch_probed_units()
    else:
        unit = next((name for name in BF16_UNITS if name in flags), None)
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if unit is not None and cap not in ("", "ALL", "DEFAULT"):
        if unit == "amx_bf16" and "AMX" not in cap:
            unit = "avx512_bf16"  # every CPU with AMX has AVX-512 BF16
        if unit == "avx512_bf16" and not any(level in cap for level in _ISA_LEVELS_WITH_AVX512_BF16):
            unit = None
    return unit


def _cpu_reason(unit: str | None) -> tuple[bool, str]:
    if unit is not None:
        return True, (
            f"this CPU computes bf16 matrix products natively ({unit}): faster than float32 at float32's quality "
            "(docs/benchmarks.md)"
        )
    return False, (
        f"this CPU has no bf16 matrix instructions ({' or '.join(BF16_UNITS)}, or ONEDNN_MAX_CPU_ISA rules them out): "
        "bf16 would be emulated, slower than float32"
    )


# The first CUDA compute capability whose tensor cores compute bf16 (Ampere: A100, A10, RTX 30xx; then Ada and
# Hopper). `torch.cuda.is_bf16_supported()` also answers True on older GPUs (V100 7.0, T4 7.5), where torch
# emulates bf16 in float32 arithmetic, slower than float32 itself.
NATIVE_BF16_COMPUTE_CAPABILITY = (8, 0)


def gpu_bf16_native(device: torch.device | str = "cuda") -> bool:
    """Whether the CUDA ``device`` computes bf16 matrix products natively (`NATIVE_BF16_COMPUTE_CAPABILITY`)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device.index) >= NATIVE_BF16_COMPUTE_CAPABILITY


def _device_reason(device: torch.device) -> tuple[bool, str]:
    """The default precision on ``device`` and why: bf16 where the processor computes bf16 matrix products natively
    (a CPU with AMX or AVX-512 BF16, a GPU of compute capability 8.0 or later), float32 elsewhere."""
    if device.type == "cpu":
        return _cpu_reason(cpu_bf16_units())
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device.index)
        major, minor = torch.cuda.get_device_capability(device.index)
        if gpu_bf16_native(device):
            return True, (
                f"this GPU ({name}, compute capability {major}.{minor}) computes bf16 matrix products natively: "
                "faster than float32 at float32's quality (docs/benchmarks.md)"
            )
        return False, (
            f"this GPU ({name}, compute capability {major}.{minor}) has no bf16 tensor cores (8.0 or later): bf16 "
            "would be emulated, slower than float32"
        )
    return False, f"bf16 is not the default on {device.type}"


def training_precision(bf16: bool | None, device: torch.device | str) -> Precision:
    """The precision of a training run on ``device``: as given (``bf16`` True or False), or by default (None): bf16
    where the device computes bf16 matrix products natively (a CPU with bf16 matrix instructions, `cpu_bf16_units`;
    a GPU of compute capability 8.0 or later, `gpu_bf16_native`), float32 elsewhere. Under DeepSpeed too: its
    ``"auto"`` precision follows this decision."""
    if bf16 is not None:
        return Precision(bool(bf16), f"--bf16 {str(bool(bf16)).lower()} was given")
    return Precision(*_device_reason(torch.device(device)))


def encoding_precision(bf16: bool | None, device: torch.device | str, weights_dtype: torch.dtype) -> Precision:
    """The precision `encode` computes in on ``device``: as given (``bf16`` True or False), or by default (None):
    bf16 autocast where the device computes bf16 matrix products natively (`training_precision`'s rule), float32
    elsewhere; weights that are not float32 (a model loaded in bf16, fp16 or float64) compute in their own dtype."""
    if bf16 is not None:
        return Precision(bool(bf16), f"bf16={bool(bf16)} was given")
    if weights_dtype != torch.float32:
        return Precision(False, f"the model's weights are {weights_dtype}, which it computes in")
    return Precision(*_device_reason(torch.device(device)))


def log_precision_once(owner, what: str, precision: Precision) -> None:
    """Log ``what`` runs in ``precision`` and why, once per ``owner`` (a model, a trainer) and decision."""
    logged = vars(owner).setdefault("_contrastive_hf_logged_precisions", set())
    key = (what, precision)
    if key not in logged:
        logged.add(key)
        logger.info("%s runs in %s: %s.", what, precision.name, precision.reason)
