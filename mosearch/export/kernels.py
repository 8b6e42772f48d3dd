"""The workload's `elementwise_kernels` as the targets' switches, and back.

Two kinds of switch exist: Liger (one flag that fuses RMSNorm, RoPE and SwiGLU together: verl's
`use_liger`, RLinf's `use_liger_kernel`) and Megatron-core's `apply_rope_fusion` /
`bias_activation_fusion` (its RMSNorm is a fused Transformer Engine kernel with no switch).
"""

from __future__ import annotations

from problems.placement.names import EAGER_PARTS

WHAT = {"fused": "fused RMSNorm, RoPE and SwiGLU", "eager": "eager RMSNorm, RoPE and SwiGLU",
        "eager-fused-norm": "a fused RMSNorm with eager RoPE and SwiGLU",
        "eager-activation": "fused RMSNorm and RoPE with an eager SwiGLU"}


def liger(kernels: str) -> bool:
    """Liger is all or nothing: on where the workload keeps RMSNorm fused (the largest of the three
    eager costs, so the nearer of the two to a partly eager setting)."""
    return not EAGER_PARTS[kernels][0]


def liger_note(kernels: str, flag: str) -> str | None:
    """The line an export with Liger switched by `flag` owes the user, None when it runs as planned."""
    if kernels == "eager":
        return None
    if kernels == "fused":
        return f"{flag} true (fused element-wise kernels, as the workload assumes) needs the liger-kernel package " \
               "on every training node."
    return (f"workload assumes {WHAT[kernels]} (elementwise_kernels {kernels}); Liger fuses all three: {flag} true, "
            "so training runs somewhat faster than predicted (needs the liger-kernel package on every training node).")


def megatron_fusions(kernels: str) -> dict:
    _, rope, act = EAGER_PARTS[kernels]
    return {"apply_rope_fusion": not rope, "bias_activation_fusion": not act}


def megatron_note(kernels: str, target: str) -> str | None:
    if kernels != "eager":
        return None
    return (f"workload assumes eager RMSNorm too; {target}'s Megatron runs RMSNorm as one fused kernel (no switch): "
            "training somewhat faster than predicted; set elementwise_kernels: eager-fused-norm to plan for that.")


def from_megatron(rope_fusion: bool, activation_fusion: bool) -> tuple[str, str | None]:
    """(elementwise_kernels, warning or None) for Megatron-core's two fusion flags."""
    parts = (False, not rope_fusion, not activation_fusion)
    for name, eager in EAGER_PARTS.items():
        if eager == parts:
            return name, None
    return "eager-fused-norm", ("bias_activation_fusion without apply_rope_fusion has no elementwise_kernels "
                                "setting: scored as eager-fused-norm (the activation counted eager).")
