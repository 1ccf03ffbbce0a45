"""Plain-numpy models of what the kernels do: the pid -> tile mirror (``tiles``), whole tile
schedules (``schedule``) and the L2 reuse model (``l2model``).  Importable without Triton."""
