# Entry points. `make demo` and `make test` are the README's two commands.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup engine venv images demo test test-unit test-ansible test-lab test-lab-extended lint lint-peers clean

setup: engine venv images

engine:
	./scripts/engine.sh

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints/oldest.txt constraints/newest.txt
	./scripts/venv.sh $(VENV)
	touch $@

images: engine venv
	$(VENV)/bin/provision lab images

demo: setup
	./scripts/demo.sh

# The venv's bin on PATH: testinfra's Ansible backend runs ansible-inventory from PATH.
# Unit tests on both cores, then the lab tests in four groups at once (scripts/lab-tests.sh).
test: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -q -p no:cacheprovider -n 2 -m "not lab" tests
	VENV=$(VENV) ./scripts/lab-tests.sh

test-lab: setup
	VENV=$(VENV) ./scripts/lab-tests.sh

# The lab tests CI leaves out (scripts/lab-tests.sh, "extended tier") with all the others.
test-lab-extended: setup
	GPUPROV_LAB_EXTENDED=1 VENV=$(VENV) ./scripts/lab-tests.sh

# The tiers (docs/benchmarks.md, "Test tiers"): pure unit tests (parsers, planner, report; no
# real Ansible) for the inner loop, then role renders through real Ansible; `make test` runs both.
test-unit: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -q -p no:cacheprovider -n 2 -m "not lab and not ansible" tests

test-ansible: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -q -p no:cacheprovider -n 2 -m "ansible and not lab" tests

lint: venv
	$(VENV)/bin/ruff check orchestrator tests bench
	$(VENV)/bin/ruff format --check orchestrator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/yamllint -s .
	$(VENV)/bin/ansible-lint --profile production .
	$(VENV)/bin/antsibull-changelog lint

# The checks Galaxy and Automation Hub judge the collection by, on the tarball it builds:
# ansible-test sanity on the oldest (2.19, Python 3.11) and the newest (2.22, Python 3.13+:
# .venv-newest) ansible-core, galaxy-importer, antsibull-docs lint-collection-docs
# (scripts/peer-checks.sh). Minutes, not seconds (docs/benchmarks.md), so apart from `lint`.
lint-peers: venv
	@[ -x .venv-newest/bin/ansible-test ] || PYTHON=$${NEWEST_PYTHON:-python3.13} ./scripts/venv.sh .venv-newest
	VENV=$(VENV) ./scripts/peer-checks.sh

clean:
	-$(VENV)/bin/provision lab down
	rm -rf $(VENV) .venv-newest .venv-peers .cache artifacts
