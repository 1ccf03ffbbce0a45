# Everything starts from a fresh machine: `make lab` or `make test` builds .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# CPU machines get a CPU build of torch (small and quick to install).  Elsewhere than this
# project's machines, point pip at a CPU index, e.g.
#   make lab TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# A machine whose $(PYTHON) already has a CUDA torch keeps it: the venv sees system packages.
TORCH_CPU_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=
LAB_ARGS ?=
# a port for `make lab` / `make lab-solutions` (default: the first free one from 8888)
LAB_PORT ?=
# where `make lab` keeps your student copies (solutions removed; your work there is never overwritten)
STUDENT_DIR ?= student
# `make student FORCE=1`: back changed student copies up (NAME.ipynb.bak-N), then write fresh ones;
# `make student MERGE=1`: back them up, then merge the course's changes in (your answer cells stay)
FORCE ?=
# `make grade SUBMISSIONS=DIR`: the folder of submitted notebooks (one per student, or a folder per student)
SUBMISSIONS ?=
MERGE ?=

# The oldest Triton we support (pyproject.toml says why), tested in a venv of its own, with a numpy
# >= 2.4 (the combination its interpreter needs gemm_kernels' fix for: CUDA torch 2.11's, Colab's).
OLDEST_TRITON ?= 3.6.0
OLDEST_VENV ?= .venv-triton36
OLDEST_STAMP := $(OLDEST_VENV)/.installed

# uv, where installed, builds a venv in seconds where pip takes minutes (.ci/run installs it); UV= uses pip.
# It reads no pip.conf, so pip's find-links (PIP_FIND_LINKS: a local CPU torch, say) are handed to it.
UV ?= $(shell command -v uv 2>/dev/null)
# $(call new_venv,DIR): a fresh venv with pip in it;  $(call pip_in,DIR): the command that installs into it
# (--allow-existing: after a `git pull` that changed pyproject.toml, the venv is updated in place, not refused)
new_venv = $(if $(UV),$(UV) venv -q --seed --allow-existing --python $(PYTHON) $(1),$(PYTHON) -m venv $(1))
pip_in = $(if $(UV),$(UV) pip install -q --python $(1)/bin/python $(foreach l,$(PIP_FIND_LINKS),--find-links $(l)),$(1)/bin/python -m pip install -q)

.PHONY: setup lab lab-student lab-solutions test fuzz test-hostile test-launch test-teach test-triton-oldest test-no-tma test-gpu test-gpu-fast test-gpu-smoke test-gpu-notebooks sanitize sanitize-ws student grade images bench bench-quick clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@if $(PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then \
	  echo ">> CUDA torch found in $(PYTHON): the venv reuses it"; \
	  $(PYTHON) -m venv --system-site-packages $(VENV) && \
	  $(BIN)/python -m pip install -q -e ".[lab,test]"; \
	else \
	  echo ">> no CUDA torch: installing the CPU build ($(TORCH_CPU_SPEC))"; \
	  $(call new_venv,$(VENV)) && \
	  $(call pip_in,$(VENV)) $(TORCH_PIP_ARGS) "$(TORCH_CPU_SPEC)" && \
	  $(call pip_in,$(VENV)) -e ".[lab,test]"; \
	fi
	@touch $(STAMP)

lab: $(STAMP)  ## JupyterLab on your student copies in student/: makes the missing ones, never overwrites one (prints the URL)
	$(BIN)/python -m gemm_kernels.lab.student --serve notebooks $(STUDENT_DIR) $(if $(LAB_PORT),--port $(LAB_PORT)) $(LAB_ARGS)

lab-student: lab  ## the same as `make lab` (its former name)

lab-solutions: $(STAMP)  ## JupyterLab on notebooks/, the solved notebooks: for teachers and CI (--allow-root only as root)
	$(BIN)/python -m gemm_kernels.lab.student --lab notebooks $(if $(LAB_PORT),--port $(LAB_PORT)) $(LAB_ARGS)

test: $(STAMP)  ## unit tests + every notebook (nbmake), on the CPU interpreter unless a GPU is present
	$(BIN)/python -m pytest -n 2 --nbmake --nbmake-timeout=600 -p no:cacheprovider -m "not launch and not teach and not hostile" $(PYTEST_ARGS)

# `make fuzz FUZZ_EXAMPLES=2000`: inputs per entry point (tests/test_fuzz.py; `make test` runs a few of each)
FUZZ_EXAMPLES ?= 300

fuzz: $(STAMP)  ## the property-based fuzzer (Hypothesis) at length: random shapes, layouts, dtypes, options and non-finite values at every public entry point, each answer against float64 or a clear error
	@mkdir -p build && rm -f build/fuzz_counts.txt
	GEMM_KERNELS_FUZZ=long GEMM_KERNELS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) GEMM_KERNELS_FUZZ_REPORT=build/fuzz_counts.txt \
	  $(BIN)/python -m pytest -n 2 -p no:cacheprovider tests/test_fuzz.py $(PYTEST_ARGS)
	@cat build/fuzz_counts.txt

test-hostile: $(STAMP)  ## forged submissions (and the honest ones beside them) graded end to end by both graders' processes: each forgery scores 0
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider -m hostile tests $(PYTEST_ARGS)

test-launch: $(STAMP)  ## the ways in without make, each in a fresh venv (PyPI): a student copy's set-up cell as in Colab, .binder/ as Binder builds it, a plain pip install
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider -m launch tests/test_launch.py $(PYTEST_ARGS)

# nbgrader in a venv of its own: its JupyterLab extensions stay out of the learners' `make lab`
TEACH_VENV ?= .venv-teach
TEACH_STAMP := $(TEACH_VENV)/.installed

$(TEACH_STAMP): pyproject.toml
	$(call new_venv,$(TEACH_VENV))
	$(call pip_in,$(TEACH_VENV)) $(TORCH_PIP_ARGS) "$(TORCH_CPU_SPEC)" -e ".[test,teach]"
	@touch $(TEACH_STAMP)

test-teach: $(TEACH_STAMP)  ## the course under nbgrader: generate_assignment, then autograde solved, blank and spoofed submissions
	$(TEACH_VENV)/bin/python -m pytest -n 2 -p no:cacheprovider -m teach tests/test_teach.py $(PYTEST_ARGS)

$(OLDEST_STAMP): pyproject.toml
	$(call new_venv,$(OLDEST_VENV))
	$(call pip_in,$(OLDEST_VENV)) $(TORCH_PIP_ARGS) "$(TORCH_CPU_SPEC)" "triton==$(OLDEST_TRITON)" "numpy>=2.4" -e ".[lab,test]"
	@touch $(OLDEST_STAMP)

# On the oldest Triton, what its version changes: the interpreter's shims and the import-time fixes
# (_triton_compat, runtime, the install), the compile views for sm_90/sm_100 (the GPU machines run 3.6),
# every launcher once in the interpreter, the exercise checks on learners' kernels, and the grader's
# rebuild of a kernel (it reads the source back as Triton's interpreter does).  The rest (every shape
# and layout of every kernel, files, gradebooks, the notebooks' tooling) runs in `make test` on the
# newest Triton, and `make test-gpu` compiles every kernel with 3.6.
OLDEST_TESTS := $(addprefix tests/,test_triton_compat.py test_runtime.py test_install.py test_compile_view.py \
	test_blackwell_view.py test_ptxas_advice.py test_blocks.py test_launchers_once.py test_launches.py test_watchdog.py \
	test_checked.py test_exercises.py test_exercises_fp8.py test_exercises_ws.py test_package_code_in_answers.py \
	test_grade_hostile_round5.py test_tuning_cache.py test_multicast_gate.py)

test-triton-oldest: $(OLDEST_STAMP)  ## the tests that Triton's version can change (OLDEST_TESTS), on the oldest supported Triton, interpreted
	$(OLDEST_VENV)/bin/python -m pytest -n 2 -p no:cacheprovider -m "not browser and not launch and not teach" $(OLDEST_TESTS) $(PYTEST_ARGS)

# NO_TMA_NOTEBOOKS= runs the switch's tests alone (CI runs the notebooks without TMA in its book build instead)
NO_TMA_NOTEBOOKS ?= notebooks
test-no-tma: $(STAMP)  ## every notebook and the switch's tests as an Ampere/Ada learner runs them (GEMM_KERNELS_ARCH=sm_86)
	GEMM_KERNELS_ARCH=sm_86 $(BIN)/python -m pytest -n 2 --nbmake --nbmake-timeout=600 -p no:cacheprovider $(NO_TMA_NOTEBOOKS) tests/test_arch_switch.py $(PYTEST_ARGS)

# The GPU targets' Python: the venv's, or one that already has CUDA torch and the test tools
# (`make test-gpu-smoke GPU_PYTHON=python3` on a machine without a network, wheels on PYTHONPATH).
GPU_PYTHON ?= $(BIN)/python
GPU_DEPS := $(if $(filter $(BIN)/python,$(GPU_PYTHON)),$(STAMP))
# `make test-gpu SHARD=2/4`: the second of four equal parts (each fits a 10-minute sitting)
SHARD ?=

test-gpu: $(GPU_DEPS)  ## the tests that need a CUDA GPU, with the default autotuning (what a learner runs); SHARD=I/N for a part
	GEMM_KERNELS_AUTOTUNE=1 $(GPU_PYTHON) -m pytest -m gpu tests $(if $(SHARD),--shard=$(SHARD)) $(PYTEST_ARGS)

test-gpu-fast: $(GPU_DEPS)  ## the same with autotuning off (each kernel's first config): quicker, not a substitute
	GEMM_KERNELS_AUTOTUNE=0 $(GPU_PYTHON) -m pytest -m gpu tests $(if $(SHARD),--shard=$(SHARD)) $(PYTEST_ARGS)

test-gpu-smoke: $(GPU_DEPS)  ## before any change lands (<= 10 min, one GPU): every notebook, every check's GPU tests, every launcher once; writes images/bench/gpu_smoke.json
	$(GPU_PYTHON) -m gemm_kernels.bench.smoke --json images/bench/gpu_smoke.json

test-gpu-notebooks: $(GPU_DEPS)  ## each notebook alone on the GPU, cold Triton cache, timed; then as learners' GPUs (T4, 8 GB RTX 30xx, RTX 40xx), pass/fail
	$(GPU_PYTHON) -m gemm_kernels.bench.notebooks --json images/bench/notebook_times.json
	$(GPU_PYTHON) -m gemm_kernels.bench.notebooks --jobs 3 --timeout 300 --arch sm_75 --memory-gb 15 --json images/bench/notebook_times_sm75.json
	$(GPU_PYTHON) -m gemm_kernels.bench.notebooks --jobs 3 --timeout 300 --arch sm_86 --memory-gb 8 --json images/bench/notebook_times_sm86.json
	$(GPU_PYTHON) -m gemm_kernels.bench.notebooks --jobs 3 --timeout 300 --arch sm_89 --json images/bench/notebook_times_sm89.json

sanitize: $(STAMP)  ## every kernel on ragged shapes under compute-sanitizer memcheck (needs a CUDA GPU)
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool memcheck --error-exitcode 1 $(BIN)/python tests/sanitize_kernels.py
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool memcheck --error-exitcode 1 $(BIN)/python tests/sanitize_bad_offs.py unchecked
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool memcheck --error-exitcode 1 $(BIN)/python tests/sanitize_bad_offs.py default
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool memcheck --error-exitcode 1 $(BIN)/python tests/sanitize_fp8.py

sanitize-ws: $(STAMP)  ## matmul_ws under memcheck, racecheck and synccheck (needs an sm_90 GPU; kernels/WS_NOTES.md reads racecheck's reports)
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool memcheck --error-exitcode 1 $(BIN)/python tests/sanitize_ws.py
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool racecheck --racecheck-report all $(BIN)/python tests/sanitize_ws.py
	GEMM_KERNELS_AUTOTUNE=0 compute-sanitizer --tool synccheck $(BIN)/python tests/sanitize_ws.py

student: $(STAMP)  ## student copies of the notebooks (solutions removed) in student/; refreshes untouched ones, keeps a copy you changed and says what the course changed since
	$(BIN)/python -m gemm_kernels.lab.student $(if $(FORCE),--force) $(if $(MERGE),--merge)

grade: $(STAMP)  ## grade a folder of submissions with the package's judge, in exam mode, sandboxed: make grade SUBMISSIONS=DIR [ROSTER=csv GRADE_CONFIG=json CANVAS=csv JOBS=2 NO_SANDBOX=1] (grades.csv, gradebook.csv, grades.json)
	@test -n "$(SUBMISSIONS)" || { echo "make grade SUBMISSIONS=DIR: the folder of submitted notebooks"; exit 2; }
	$(BIN)/python -m gemm_kernels.lab.grade $(SUBMISSIONS) --out grades.csv --json grades.json --gradebook gradebook.csv $(if $(ROSTER),--roster $(ROSTER)) $(if $(GRADE_CONFIG),--config $(GRADE_CONFIG)) $(if $(CANVAS),--canvas $(CANVAS)) $(if $(JOBS),--jobs $(JOBS)) $(if $(NO_SANDBOX),--no-sandbox)

images: $(STAMP)  ## regenerate the schedule/pointer pictures images/*.png from gemm_kernels.viz.drawings (deterministic)
	$(BIN)/python -m gemm_kernels.viz.images

bench: $(STAMP)  ## time every suite on a CUDA GPU; writes bench-results/ and the committed copy in images/bench/
	$(BIN)/python -m gemm_kernels.bench --suite all --commit

bench-quick: $(STAMP)  ## short benchmark run (on a CPU: every suite's kernels at tiny sizes, correctness only)
	$(BIN)/python -m gemm_kernels.bench --quick

# The course as a website (gemm_kernels.book): every notebook executed on the CPU (interpreter) and
# rendered with its outputs, in build/book; outputs cached in build/book-cache.
BOOK_DIR ?= build/book
# notebooks executed at once (each in its own kernel)
BOOK_JOBS ?= 2
# SOLUTIONS=0: pages without the solutions, as the student copies show them (a class's site)
SOLUTIONS ?= 1
BOOK_STAMP := $(VENV)/.installed-book
.PHONY: book test-book

$(BOOK_STAMP): $(STAMP) pyproject.toml
	$(call pip_in,$(VENV)) -e ".[book]"
	@touch $(BOOK_STAMP)

book: $(BOOK_STAMP)  ## the course as a website in build/book (open build/book/index.html; SOLUTIONS=0: without solutions); fails on any notebook error or broken link
	$(BIN)/python -m gemm_kernels.book build $(BOOK_DIR) --jobs $(BOOK_JOBS)$(if $(filter 0,$(SOLUTIONS)), --no-solutions)

test-book: $(BOOK_STAMP)  ## the site `make book` built: every notebook executed, links and images, every page in headless Chromium
	GEMM_KERNELS_BOOK_SITE=$(BOOK_DIR) $(BIN)/python -m pytest -p no:cacheprovider -m book tests/test_book.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(TEACH_VENV) build *.egg-info
