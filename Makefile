# One way to run, one way to test. `make run` and `make test` work on a fresh Debian/Ubuntu machine with
# Python 3.11+, including a stock system python that refuses global installs (PEP 668): everything Python goes
# into a project virtual environment, `.venv/` (ignored by git). `make test` is exactly what CI runs (.ci/run).
#
# PYTHON: the interpreter the venv is made from (the newest python3.1x >= 3.11 on PATH, else python3).
# VENV:   where the venv lives; point several checkouts at one with `make test VENV=/path/to/venv`.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
            command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
            2>/dev/null && { echo $$p; break; }; done)
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends

.PHONY: run test mutants fuzz mutmut venv deps test-deps system-deps

run: deps
	$(PY) -m components.launch

# The whole suite: everything but the browser tests in two processes, then the browser tests beside the mutation
# check. The browser tests run one at a time (each drives a live server and a chromium; two at once on a small machine
# only slow each other past their timeouts) and spend much of their time waiting on the page, so the mutation check's
# two workers use the cores meanwhile; its log is printed after theirs. The check assumes the tests it names pass on
# the unmutated code: the first line has just run every one of them but the browser tests (make stops when one
# fails), and a browser test that fails fails `make test` whatever its mutants gave, so its own baseline run of them
# (`make mutants`) would only repeat them. It runs every mutant (the compiled loop's run its source as Python).
# Each stage ends with its slowest tests (mutants, with the CPU seconds each used), so that every CI log says where
# its time went, and two logs at different loads compare.
# The first stage's controller compiles the simulator's loop before its two workers start (tests/conftest.py), so a
# fresh clone compiles it once, not once per worker.
test: test-deps
	$(PY) -m pytest -n 2 -m "not e2e" --durations=25
	@log=$$(mktemp); echo "make: the mutation check runs beside the browser tests; its log follows theirs"; \
	$(PY) scripts/mutants.py --durations 25 >$$log 2>&1 & check=$$!; \
	trap 'kill $$check 2>/dev/null; rm -f $$log' INT TERM; \
	$(PY) -m pytest -m e2e --durations=10; browser=$$?; \
	wait $$check; mutants=$$?; cat $$log; rm -f $$log; \
	test $$browser -eq 0 && test $$mutants -eq 0

# The mutation check alone: every deliberate bug of tests/mutants/*.toml, applied to a copy of the checkout one at
# a time (two at once), must fail the tests it names (scripts/mutants.py; ONLY=name runs one).
mutants: test-deps
	$(PY) scripts/mutants.py --baseline $(if $(ONLY),--only $(ONLY))

# The property tests with many more examples than CI's 300 per test, drawn at random and shrunk when one fails;
# hypothesis' example database (.hypothesis/) keeps what fails for the next run. EXAMPLES sets how many per test.
EXAMPLES ?= 5000
fuzz: test-deps
	SHAPEVIZ_FUZZ_RANDOM=1 SHAPEVIZ_FUZZ_EXAMPLES=$(EXAMPLES) $(PY) -m pytest -q -p no:randomly tests/unit/test_loops_agree.py

# Mutations made by a tool: mutmut over the modules that give the answer, SAMPLE mutants of each drawn with SEED
# (0: every one; hours on two cores). Kill rates per module: tests/README.md.
SAMPLE ?= 12
SEED ?= 39
mutmut: test-deps
	$(PY) scripts/mutmut_sample.py --sample $(SAMPLE) --seed $(SEED)

deps: $(VENV)/.deps

test-deps: system-deps $(VENV)/.test-deps

# The venv. A stock Debian/Ubuntu python lacks ensurepip until its `python3.X-venv` package is installed.
$(PY):
	@test -n "$(PYTHON)" || { echo "make: no Python 3.11+ on PATH (install python3, or pass PYTHON=...)" >&2; exit 2; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  rm -rf $(VENV); \
	  ver=$$($(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); \
	  echo "make: installing Debian's python$$ver-venv so that $(PYTHON) can make a virtual environment"; \
	  $(SUDO) apt-get update -qq && $(APT) python$$ver-venv && $(PYTHON) -m venv $(VENV); }
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip

# Stamps: reinstall only when a requirements file changes.
$(VENV)/.deps: requirements.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

$(VENV)/.test-deps: requirements.txt requirements-dev.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@ $(VENV)/.deps

# PNG export (kaleido) and the browser tests (playwright) drive the system chromium: Debian's package, never a
# browser download.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && $(APT) chromium fonts-dejavu-core; }
