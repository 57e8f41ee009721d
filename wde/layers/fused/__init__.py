"""Fused decoder kernels (issue 51): residual add + RMSNorm, q/k RMSNorm + rotary in place, and
activation-and-mul, as Triton kernels on CUDA and as the PyTorch reference everywhere else.

``ops.py`` is what a model calls: each function takes the same arguments on every device and runs the
Triton kernel (``triton_kernels.py``) where ``fused_kernels_enabled`` says so (a CUDA tensor, Triton
importable, ``WDE_FUSED_KERNELS`` not ``0``), else the reference (``reference.py``), which computes what
the unfused layers compute. Tests run the kernels under Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``) against the reference.
"""
