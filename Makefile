# Two commands do everything from a fresh machine:
#   make demo   set up, run the default example for real, draw its expected and measured figures
#   make test   set up, run the whole test suite (LaTeX and multi-process tests included)
VENV ?= .venv
PY := $(VENV)/bin/python
DTGEN := $(VENV)/bin/dtgen
# CPU build of PyTorch. On a GPU machine install the CUDA build of your choice first.
TORCH ?= torch==2.13.0
# The oldest supported torch (pyproject's `run` extra: >=2.10,<2.16). The registry has only
# CUDA builds of it (a 3 GB download, 7 GB installed with the nvidia-* packages); they run on CPU.
OLDEST_TORCH ?= torch==2.10.0
OLDEST_VENV ?= .venv-torch210
# The runner's core tests on it: every strategy once and the numerics test (its adamw + clip +
# schedule case per strategy, the one that exercises the most of torch.optim and autocast-free
# numerics; the whole file runs on the CPU wheel), gossip and async PS, a crash and a hang,
# and the pipeline's per-microbatch spans (they wrap private PipelineStage methods).
CORE_TESTS := tests/test_torch_compat.py tests/test_runner_numerics.py \
	tests/test_runner.py::test_strategy_trains_and_leaves_a_complete_run_dir \
	tests/test_runner.py::test_crash_names_the_rank_keeps_the_partial_trace_and_the_processs_signal_handlers \
	tests/test_runner.py::test_hang_is_stopped_after_the_timeout \
	tests/test_runner_ps_pipeline.py::test_async_parameter_server_records_staleness \
	tests/test_runner_ps_pipeline.py::test_pipeline_1f1b_microbatch_spans

# Meshes on the oldest torch: the 2-D all-reduce mesh and the 3-D one (pipeline x FSDP x
# tensor) cover its DeviceMesh, pipelining and FSDP2 calls; the other mesh cases only
# change the data method (CI time).
CORE_SELECT := (not test_runner_numerics or adamw or tied_embedding) and not mesh-fsdp-tensor \
	and not mesh-tree-tensor and not mesh-data-pipeline

.PHONY: setup tex demo test oldest-torch test-oldest-torch gpu-check bench clean

$(VENV)/.ready: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[run,dev]'
	touch $@

setup: $(VENV)/.ready

tex:
	bash scripts/ensure-tex.sh

demo: setup tex
	$(DTGEN) run examples/ps-sync.yaml --out runs/demo --force
	$(DTGEN) figure examples/ps-sync.yaml -o figures/demo --width column --format pdf --format png
	$(DTGEN) figure runs/demo -o figures/demo --width column --format pdf --format png
	@echo "Figures: figures/demo/   Run: runs/demo/   Trace (open in https://ui.perfetto.dev): runs/demo/trace.json"

# The tests that start no torch.distributed processes run on every core (pytest-xdist:
# mostly pdflatex compiles). Those that do (marked dist) run two at a time: a small run's
# ranks mostly wait for each other, so on a 2-core machine one test at a time kept the cores
# 55% busy and two 89%. The dist tests that need the machine to themselves (marked solo:
# network namespaces, fixed ports, time limits, timings they compare) run one at a time
# after them. All three parts run; any failing fails the target.
# Several hundred test processes import dtgen: its modules are byte-compiled once here, as
# pip compiles an installed package but not an editable one (and with PYTHONDONTWRITEBYTECODE
# set no process writes them, so each would compile every module it imports again).
COMPILE := PYTHONDONTWRITEBYTECODE= $(PY) -m compileall -q opentikz_dt runner > /dev/null
# pytest rewrites every test module's asserts on import and keeps the result beside it, but
# not with PYTHONDONTWRITEBYTECODE set: then each pytest process (each xdist worker) rewrites
# all of them again, about 7 s of CPU. The test runs write them (__pycache__, ignored by git).
TEST_ENV := OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=

test: setup tex
	$(COMPILE)
	$(TEST_ENV) $(PY) -m pytest -q -m "not dist" -n auto; parallel=$$?; \
	$(TEST_ENV) $(PY) -m pytest -q -m "dist and not solo" -n 2; paired=$$?; \
	$(TEST_ENV) $(PY) -m pytest -q -m "dist and solo"; serial=$$?; \
	test $$parallel -eq 0 && test $$paired -eq 0 && test $$serial -eq 0

# The oldest torch alone, a 3 GB download: CI (.ci/run) fetches it while TeX and the main
# environment install.
oldest-torch: $(OLDEST_VENV)/.torch

$(OLDEST_VENV)/.torch:
	python3 -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel
	# --no-cache-dir: the 3 GB download is not kept a second time in pip's cache
	$(OLDEST_VENV)/bin/python -m pip install -q --no-cache-dir "$(OLDEST_TORCH)"
	touch $@

$(OLDEST_VENV)/.ready: $(OLDEST_VENV)/.torch pyproject.toml
	$(OLDEST_VENV)/bin/python -m pip install -q -e '.[run,dev]'
	touch $@

test-oldest-torch: $(OLDEST_VENV)/.ready
	$(COMPILE)
	$(OLDEST_VENV)/bin/python -c "import torch; print('oldest supported torch:', torch.__version__)"
	$(TEST_ENV) $(OLDEST_VENV)/bin/python -m pytest -q $(CORE_TESTS) -k "$(CORE_SELECT)"

# On a GPU box, once: the gpu-marked tests, every example on the GPU, the memory check and
# the GPU benchmark, in one file benchmarks/results/gpu-check_<hardware>_<yyyy-mm>.md (docs/gpu.md).
# With the box's own torch: PYTHON=python3 bash scripts/gpu-check.sh; without a GPU: --dry-run
gpu-check: setup
	PYTHON=$(PY) bash scripts/gpu-check.sh

bench: setup tex
	# bench_gpu.py needs a GPU: make gpu-check runs it
	for b in $(filter-out benchmarks/bench_gpu.py,$(wildcard benchmarks/bench_*.py)); do OMP_NUM_THREADS=1 $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(OLDEST_VENV) runs figures build dist *.egg-info
