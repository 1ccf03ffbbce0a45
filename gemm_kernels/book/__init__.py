"""The course as a website: ``make book``, or ``python -m gemm_kernels.book build OUT``.

Every notebook is executed (on the CPU, in Triton's interpreter) and rendered with its outputs,
beside a syllabus and a glossary; each page gets its objectives, previous/next links, the student
copy and launch buttons (:mod:`.build`, :mod:`.pages`, :mod:`.sphinxext`).

Why Sphinx with MyST-NB rather than Jupyter Book 2: everything installs from PyPI as the ``[book]``
extra (Jupyter Book 2's engine, mystmd, runs on Node.js); MyST-NB caches executions (jupyter-cache),
fails the build on a cell error, and renders saved ipywidgets state; and what each page needs (the
glossary links, the header) is a small Sphinx extension in Python, tested like the rest.
"""

from __future__ import annotations

# the addresses live below the book, where the student copies need them too (tests/test_layers.py)
from ..lab.published import DEFAULT_REPO, REPO_ENV, STUDENT_BRANCH, binder_url, colab_url, github_repo  # noqa: F401
