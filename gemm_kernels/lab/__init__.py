"""What the notebooks need around the kernels: traces of real runs (``traces``), the compile
view (``compile_view``), the deliberately broken teaching kernels (``teaching``), the exercise
checks (``exercises``), the student copies (``student``), the Gluon primer of notebook 08
(``gluon_primer``), which exercises have passed (``progress()``), exam mode (``exam``) and the grading
command for a class (``grade``)."""

from .progress import progress  # noqa: F401  (gk.lab.progress(); light: no torch, no triton)
