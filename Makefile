# Two commands on a fresh machine:
#   make demo   set up, then compare two s5cmd releases against an embedded MinIO (--quick)
#   make test   set up, then run the test suite
export PATH := $(CURDIR)/tools/bin:$(PATH)
DEMO_ARGS ?= -s v2.2.2 v2.3.0 --source module --quick

.PHONY: setup doctor demo test test-fast dist clean
setup:
	@bash scripts/setup.sh

doctor:
	@./bench.py doctor

# the sdist and the wheel (`pipx install dist/refbench-*.whl` gives a `refbench` command)
dist: setup
	.venv/bin/python -m pip wheel --no-deps -w dist .

demo: setup
	./bench.py $(DEMO_ARGS)
	@echo; cat summary.md

test: setup
	.venv/bin/python -m pytest -ra $(PYTEST_ARGS)

test-fast: setup
	.venv/bin/python -m pytest -ra -m "not slow" $(PYTEST_ARGS)

clean:
	rm -rf builds tools .venv dist summary.md results.json
