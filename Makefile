# Two commands do everything from a fresh machine:
#   make demo   set up, run the default example for real, draw its expected and measured figures
#   make test   set up, run the whole test suite (LaTeX and multi-process tests included)
VENV ?= .venv
PY := $(VENV)/bin/python
DTGEN := $(VENV)/bin/dtgen
# CPU build of PyTorch. On a GPU machine install the CUDA build of your choice first.
TORCH ?= torch==2.13.0

.PHONY: setup tex demo test bench clean

$(VENV)/.ready: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=70.1" wheel
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[run,dev]'
	touch $@

setup: $(VENV)/.ready

tex:
	bash scripts/ensure-tex.sh

demo: setup tex
	$(DTGEN) run examples/ps-sync.yaml --out runs/demo --force
	$(DTGEN) figure examples/ps-sync.yaml -o figures/demo --format pdf --format png
	$(DTGEN) figure runs/demo -o figures/demo --format pdf --format png
	@echo "Figures: figures/demo/   Run: runs/demo/   Trace (open in https://ui.perfetto.dev): runs/demo/trace.json"

test: setup tex
	OMP_NUM_THREADS=1 $(PY) -m pytest -q

bench: setup tex
	for b in benchmarks/bench_*.py; do OMP_NUM_THREADS=1 $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) runs figures build dist *.egg-info
