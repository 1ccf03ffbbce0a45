"""Plain-numpy models of what the kernels do: the pid -> tile mirror (``tiles``), whole tile
schedules (``schedule``), the L2 reuse model (``l2model``) and the warp-specialized kernel's
timeline (``ws_timeline``).  Importable without Triton."""
