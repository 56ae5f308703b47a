# Two commands for a newcomer: `make run` (the demo) and `make test` (the whole suite).
# Everything runs from the project's virtual environment in .venv/.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# checkov lives in its own environment: it pins an older boto3 than the runner's.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
SOURCES := runner jobs infra demo tests bench

.PHONY: run test test-fast bench lint venv jars kafka yarn postgres chromium node-python clean synth local-aws local-platform deploy-infra destroy-infra package package-lambda push-artifacts

venv: $(STAMP)

# The JVM jar sets (runner/core/jars.py: Kafka connector, spark-avro, hadoop-aws, MSK IAM auth; Kafka's own
# broker for tests and the demo; Hadoop's YARN cluster for the YARN target's tests), fetched once with mvn and
# checked against their locked SHA-256. A set already in the cache costs no mvn. Then the runner's own jar,
# compiled from jobs/java/engine/ with javac when its sources changed.
jars: $(STAMP)
	@$(BIN)/python -m infra.jars fetch

# A Kafka broker on 127.0.0.1:9092 (KRaft, data in a temporary folder) until Ctrl-C, to try the Kafka tables.
kafka: jars
	@$(BIN)/python -m demo.kafka_broker $(if $(TOPICS),$(foreach t,$(TOPICS),--topic $(t)))

# A YARN cluster on 127.0.0.1 (Hadoop's MiniYARNCluster: a ResourceManager and a NodeManager in one JVM) until
# Ctrl-C, to try the YARN target: it prints the HADOOP_CONF_DIR and SPARK_CONF_DIR to submit with.
yarn: jars
	@$(BIN)/python -m demo.yarn_cluster

# PostgreSQL's server for the jdbc tests and benchmarks (Debian's postgresql-15), installed where it is missing;
# each test run starts a throwaway cluster of its own (demo/postgres_server.py).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
postgres:
	@test -x /usr/lib/postgresql/15/bin/pg_ctl || { \
		echo "==> installing PostgreSQL 15 (Debian's postgresql-15)"; \
		$(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q postgresql-15 >/dev/null; }

# Chromium for the console's browser tests (Debian's chromium, driven by Playwright), installed where it is missing.
chromium:
	@command -v chromium >/dev/null || { \
		echo "==> installing Chromium (Debian's chromium) for the console's browser tests"; \
		$(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q chromium >/dev/null; }

# The EMR primary node's stand-in (infra/localplatform.py) runs its scripts as an unprivileged user (nobody,
# when this machine's user is root), who needs a Python 3.11 out of root's home for the node's image: Debian's,
# with its venv module, installed where missing.
node-python:
	@[ "$$(id -u)" != 0 ] || dpkg -s python3.11-venv >/dev/null 2>&1 || { \
		echo "==> installing Python 3.11 with venv (Debian's python3.11-venv) for the EMR node's stand-in"; \
		apt-get update -q >/dev/null && apt-get install -y -q python3.11-venv >/dev/null; }

$(STAMP): pyproject.toml
	@echo "==> preparing $(VENV) (first time: downloads pyspark, about 450 MB)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --progress-bar on -e ".[dev,infra]"
	@touch $(STAMP)
	@echo "==> $(VENV) ready: $(BIN)/sql-runner"

$(CHECKOV_STAMP):
	@echo "==> preparing $(CHECKOV_VENV) (checkov, for the infrastructure tests)"
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV) || python3 -m venv $(CHECKOV_VENV)
	@$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check checkov==3.3.30
	@touch $(CHECKOV_STAMP)

run: jars
	@$(BIN)/python -m demo

# The tests that need no JVM and no server (tests/tiers.py: what each test needs is a mark), in about a minute:
# the feedback for a change to the control plane. `make test` runs them too, with everything else.
test-fast: $(STAMP) $(CHECKOV_STAMP)
	@$(BIN)/ruff check $(SOURCES)
	@$(BIN)/ruff format --check --quiet $(SOURCES)
	@$(BIN)/python -m pytest -q -n 2 --dist worksteal --fast

# The platform's journey (mostly waiting on Terraform's provider and YARN) in a pytest of its own beside two test
# processes for the rest (a test mostly waits on its Spark jobs; a third such process makes the timing of the
# end-to-end tests flaky on two cores), then the tests marked `alone`, which time what they check, one at a time
# (tests/suite.py). PYTEST_ARGS go to every run, e.g. PYTEST_ARGS=--durations=20.
test: jars postgres chromium node-python $(CHECKOV_STAMP)
	@$(BIN)/ruff check $(SOURCES)
	@$(BIN)/ruff format --check --quiet $(SOURCES)
	@$(BIN)/python -m tests.suite $(PYTEST_ARGS)

# Benchmarks, side by side, each with its own rounds (never part of `make test`); bench/results/latest.json.
bench: jars postgres
	@began=$$(date +%s); \
	for bench in plan metadata overhead nexmark kafka changelog changelog_join lookup startup; do \
		start=$$(date +%s); \
		$(BIN)/python bench/$$bench.py || exit 1; \
		echo "bench/$$bench.py took $$(( $$(date +%s) - start )) s"; \
	done; \
	took=$$(( $$(date +%s) - began )) && echo "make bench took $$((took / 60)) min $$((took % 60)) s"

# ---- AWS infrastructure per team (infra/teams.yaml) ----------------------------------------
TEAM ?=

synth: $(STAMP)
	@$(BIN)/python -m infra.main

# AWS on this machine for the commands below (infra/localaws.py): moto over TLS, the prerequisites of teams.yaml;
# it prints the environment that points deploy-infra, the AWS CLI and sql-runner at it.
local-aws: $(STAMP)
	@$(BIN)/python -m infra.localaws

# The team's whole platform on this machine until Ctrl-C (infra/localplatform.py, docs/aws.md): a broker for MSK,
# a YARN cluster for EMR, the local AWS endpoint, make package and make deploy-infra, the primary node's bootstrap,
# the cluster's first steps and the deploy Lambda's runtime; authors push manifests with the environment it prints.
local-platform: jars node-python
	@test -n "$(TEAM)" || { echo "usage: make local-platform TEAM=<name from infra/teams.yaml>"; exit 2; }
	@$(BIN)/python -m demo.local_platform --team $(TEAM)

deploy-infra: $(STAMP)
	@test -n "$(TEAM)" || { echo "usage: make deploy-infra TEAM=<name from infra/teams.yaml>"; exit 2; }
	@$(BIN)/python -m infra.terraform deploy --team "$(TEAM)"

destroy-infra: $(STAMP)
	@test -n "$(TEAM)" || { echo "usage: make destroy-infra TEAM=<name from infra/teams.yaml>"; exit 2; }
	@$(BIN)/python -m infra.terraform destroy --team "$(TEAM)" $(if $(filter yes,$(DELETE_DATA)),--delete-data)

package: jars
	@$(BIN)/python -m infra.package all

package-lambda: $(STAMP)
	@$(BIN)/python -m infra.package lambda

push-artifacts: $(STAMP)
	@test -n "$(TEAM)" || { echo "usage: make push-artifacts TEAM=<name from infra/teams.yaml>"; exit 2; }
	@$(BIN)/python -m infra.package push --team "$(TEAM)"

lint: $(STAMP)
	@$(BIN)/ruff check $(SOURCES)
	@$(BIN)/ruff format --check $(SOURCES)
	@$(BIN)/lint-imports --no-logo

clean:
	rm -rf demo-data .sql-runner .pytest_cache .ruff_cache .import_linter_cache cdktf.out dist
