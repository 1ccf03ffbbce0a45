"""Where the course is published: its GitHub repository (``GEMM_KERNELS_REPO`` overrides it, so
forks install and open their own), the branch of student copies that Colab opens, and the Colab and
Binder addresses of a notebook.

Here in the lab's layer because the student copies' set-up cell installs from that repository
(:mod:`.student`); the book's launch buttons use the same names (:mod:`gemm_kernels.book`).
"""

from __future__ import annotations

import os
import re

#: the GitHub repository the launch buttons open (``GEMM_KERNELS_REPO`` overrides it, e.g. with
#: ``${{ github.repository }}`` in GitHub Actions)
DEFAULT_REPO = "gemm-kernels/gemm-kernels"
REPO_ENV = "GEMM_KERNELS_REPO"
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")  # whole strings only (fullmatch: `$` takes a final newline)


def github_repo(repo: str | None = None) -> str:
    """``repo``, else ``$GEMM_KERNELS_REPO``, else :data:`DEFAULT_REPO`; ValueError unless OWNER/NAME."""
    value = repo or os.environ.get(REPO_ENV) or DEFAULT_REPO
    if not isinstance(value, str) or not _REPO.fullmatch(value):
        source = "repo" if repo else REPO_ENV
        raise ValueError(f"{source} must be a GitHub repository as OWNER/NAME (e.g. {DEFAULT_REPO}), got {value!r}")
    return value


#: the branch holding the student copies at its root: Colab opens files from GitHub only, and student/
#: is not committed, so .github/workflows/book.yml force-pushes fresh copies there from every push to main
STUDENT_BRANCH = "student-copies"


def colab_url(notebook: str, repo: str | None = None) -> str:
    """Colab opening the student copy ``<notebook>`` on the repository's :data:`STUDENT_BRANCH` branch."""
    return f"https://colab.research.google.com/github/{github_repo(repo)}/blob/{STUDENT_BRANCH}/{notebook}"


def binder_url(notebook: str, repo: str | None = None) -> str:
    """Binder building the repository (``.binder/``: its postBuild makes ``student/``) and opening
    JupyterLab on ``student/<notebook>``."""
    return f"https://mybinder.org/v2/gh/{github_repo(repo)}/HEAD?labpath=student/{notebook}"
