"""What the notebooks need around the kernels: traces of real runs (``traces``), the compile
view (``compile_view``), the deliberately broken teaching kernels (``teaching``), the exercise
checks (``exercises``) and the student copies (``student``)."""
