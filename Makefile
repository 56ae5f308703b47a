# Two commands for a newcomer: `make run` (the demo) and `make test` (the whole suite).
# Everything runs from the project's virtual environment in .venv/.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@echo "==> preparing $(VENV) (first time: downloads pyspark, about 450 MB)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --progress-bar on -e ".[dev]"
	@touch $(STAMP)
	@echo "==> $(VENV) ready: $(BIN)/sql-runner"

run: $(STAMP)
	@$(BIN)/python -m runner.demo

test: $(STAMP)
	@$(BIN)/python -m pytest -q

lint: $(STAMP)
	@$(BIN)/ruff check runner jobs tests bench

clean:
	rm -rf demo-data .sql-runner .pytest_cache
