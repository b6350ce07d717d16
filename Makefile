# One way to run, one way to test. `make run` and `make test` work on a fresh Debian/Ubuntu machine with
# Python 3.11+; `make test` is exactly what CI runs (.ci/run).
PYTHON ?= python3
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: run test deps test-deps system-deps

run: deps
	$(PYTHON) -m streamlit run app.py

test: test-deps
	$(PYTHON) -m pytest

deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements.txt

test-deps: system-deps
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt

# PNG export (kaleido) and the browser tests (playwright) drive the system chromium: Debian's package, never a
# browser download.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; }
