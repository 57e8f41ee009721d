"""Host arrays built in numpy (torch's small CPU ops cost more in dispatch than in work) onto the device."""

from __future__ import annotations

import numpy as np
import torch


def host_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Host array -> device tensor (the array's memory itself on CPU); on CUDA through pinned memory
    (torch's caching host allocator) so the copy is asynchronous."""
    tensor = torch.from_numpy(array)
    if device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)
