# Every target installs what it needs into a local virtual environment first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Oversubscribe freely: MPI tests run 3 ranks on a 2-core CI machine.  Tests select numba's
# workqueue threading layer (cheap on an oversubscribed machine); runs and benchmarks keep the
# package's choice, OpenMP (physics/__init__.py).
MPIEXEC := $(BIN)/mpiexec
MPI_TIMEOUT := --timeout=300 --timeout-method=thread
TEST_ENV := NUMBA_THREADING_LAYER=$${NUMBA_THREADING_LAYER:-workqueue} OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}

# The extras `make install` puts in the venv, and the versions it takes for every package
# (pip included): constraints.txt, written by `make lock`, so that a fresh clone and CI install
# what the last lock was tested with rather than whatever PyPI offers that day.
EXTRAS := mpi,mpich,dev,cosmic
CONSTRAINTS := constraints.txt

.PHONY: validate-nbody install lock run test test-serial test-mpi bench scaling compute-scaling validate validate-fewbody validate-se-cluster validate-young-dense lint clean

$(STAMP): setup.cfg pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c $(CONSTRAINTS) --upgrade pip
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

# Re-resolve the pins: the newest versions setup.cfg allows, installed without constraints into
# a throwaway venv (removed afterwards, also on failure) exactly as `install` does, then frozen
# (pip and setuptools too, the project itself left out).  Then `make clean test` and commit.
# LOCK_OUT=FILE writes elsewhere (to compare without touching the pins).
LOCK_OUT ?= $(CONSTRAINTS)
lock:
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install -q --upgrade pip; \
	"$$tmp/venv/bin/python" -m pip install -q -e '.[$(EXTRAS)]'; \
	{ echo "# Versions make install pins (pip install -c); make lock rewrites this file." \
	       "$$($(PYTHON) --version), extras $(EXTRAS)."; \
	  "$$tmp/venv/bin/python" -m pip freeze --all --exclude-editable; } > "$$tmp/lock.txt"; \
	cp "$$tmp/lock.txt" $(LOCK_OUT)

run: install
	$(BIN)/cmc run examples/plummer_small.ini -o runs/plummer_small --resume
	$(BIN)/cmc plot runs/plummer_small

test: test-serial test-mpi

# Every test has a time limit (pytest-timeout) and every mpiexec an outer one, so a hang fails
# instead of blocking CI; under MPI the thread method ends the hung rank, and mpiexec the job.
test-serial: install
	$(TEST_ENV) $(PY) -m pytest -q --timeout=900 tests --ignore=tests/mpi

test-mpi: install
	$(TEST_ENV) timeout 900 $(MPIEXEC) -n 2 $(PY) -m pytest -q -p no:cacheprovider $(MPI_TIMEOUT) tests/mpi
	$(TEST_ENV) timeout 900 $(MPIEXEC) -n 3 $(PY) -m pytest -q -p no:cacheprovider $(MPI_TIMEOUT) tests/mpi
	$(TEST_ENV) timeout 600 $(MPIEXEC) -n 4 $(PY) -m pytest -q -p no:cacheprovider $(MPI_TIMEOUT) \
		tests/mpi/test_engine_mpi.py -k sweep

bench: install
	$(PY) bench/run_bench.py $(BENCH_ARGS)
	$(PY) bench/perf_model.py
	$(PY) bench/bench_fewbody.py $(BENCH_ARGS)
	$(PY) bench/bench_binaries.py $(BENCH_ARGS)
	$(PY) bench/bench_output.py $(BENCH_ARGS)
	$(PY) bench/bench_stellar_evolution.py $(BENCH_ARGS)
	$(PY) bench/bench_nbody.py $(BENCH_ARGS)
	$(PY) bench/bench_zones.py

# P = 1, 2, 4, ... up to the machine's cores, threads and ranks (bench/scaling.py); writes
# runs/scaling.json and prints the check of the performance model (docs/performance.md)
SCALING_PS ?= $(shell $(PY) -c "import os; n = os.cpu_count(); print(','.join(str(2**k) for k in range(n.bit_length()) if 2**k <= n))")
scaling: install
	$(PY) bench/scaling.py measure runs/scaling.json --p $(SCALING_PS)
	$(PY) bench/scaling.py report runs/scaling.json --no-doc

# what each of P = 1-16 ranks computes, measured as CPU time on any machine (ranks may
# outnumber the cores; bench/compute_scaling.py): writes the section of docs/performance.md
compute-scaling: install
	$(PY) bench/compute_scaling.py measure docs/performance_compute_scaling.json --p 1,2,4,8,16 --n 100000,1000000
	$(PY) bench/compute_scaling.py report docs/performance_compute_scaling.json

validate: install validate-fewbody
	$(PY) bench/validate.py $(VALIDATE_ARGS)
	$(PY) bench/validate_zones.py --n 10000 --seeds 1-8
	$(PY) bench/validate_binaries.py
	$(PY) bench/validate_tidal.py --resume
	$(PY) bench/validate_se.py
	$(PY) bench/validate_pn25.py

validate-fewbody: install
	$(PY) bench/validate_fewbody.py

# Issue 50's comparison (docs/validation_nbody.md): the equal-mass Plummer N = 1000 model by four
# Monte Carlo seeds (minutes each) and by direct N-body, seed 1, 6th order, to 30 t_rh0 (hours
# on two cores; continued from its checkpoint when there is one), then cmc compare.
validate-nbody: install
	mkdir -p runs/nb1000
	for s in 1 2 3 4; do [ -f runs/nb1000/mc_s$$s/diagnostics.h5 ] || $(BIN)/cmc run \
	  examples/nbody_compare.ini -o runs/nb1000/mc_s$$s --set initial.seed=$$s \
	  --set run.t_max=40 --set run.n_core_stop=-1 --set binaries.three_body=all; done
	# (exit 3: the N-body run stopped in an unregularised triple, docs/validation_nbody.md
	# "Where the N-body run stops": what it reached is still compared, then make fails)
	code=0; if [ -f runs/nb1000/nb_s1/checkpoint.h5 ]; then $(BIN)/cmc nbody --restart \
	  runs/nb1000/nb_s1 --t-end 592 || code=$$?; else $(BIN)/cmc nbody examples/nbody_compare.ini \
	  -o runs/nb1000/nb_s1 --order 6 --t-end 592 || code=$$?; fi; \
	[ $$code -eq 0 ] || [ $$code -eq 3 ] || exit $$code; \
	$(BIN)/cmc compare runs/nb1000/mc_s1 runs/nb1000/mc_s2 runs/nb1000/mc_s3 runs/nb1000/mc_s4 \
	  runs/nb1000/nb_s1 -o docs/validation_nbody_N1000 && exit $$code

# Issue 48's cluster of evolving stars (examples/king_se.ini) to 2 Gyr: about 10 hours on one
# core; run (or continued from its checkpoint) in runs/ (BSE writes fort.99 there), then the
# page docs/validation_se_cluster.md.  The script alone reads a run that is still going.
validate-se-cluster: install
	mkdir -p runs
	if [ -f runs/val2_n5e4/checkpoint.h5 ]; then \
	  cd runs && ../$(BIN)/cmc restart val2_n5e4 --set run.max_wall_hours=0; \
	else cd runs && ../$(BIN)/cmc run ../examples/king_se.ini -o val2_n5e4 \
	  --set run.max_wall_hours=0; fi
	$(PY) bench/validate_se_cluster.py runs/val2_n5e4

# Issue 49's young dense cluster (examples/young_dense.ini, N = 1e5) to 10 Myr: about two hours
# on one core, run or continued in runs/ydc; then docs/validation_young_dense.json and .png
# (docs/validation_collisions.md quotes them).
validate-young-dense: install
	mkdir -p runs/ydc
	if [ -f runs/ydc/n1e5/checkpoint.h5 ]; then \
	  cd runs/ydc && ../../$(BIN)/cmc restart n1e5 --set run.max_wall_hours=0; \
	else cd runs/ydc && ../../$(BIN)/cmc run ../../examples/young_dense.ini -o n1e5 \
	  --set run.max_wall_hours=0; fi
	$(PY) bench/validate_young_dense.py runs/ydc/n1e5

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
