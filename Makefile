# spark-governor: `make demo` runs the example job end to end; `make test` runs the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test test-unit bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# the JVM listener jar (collectors/jvm): rebuilt when its sources or the installed Spark changed; without a JDK it
# says how to get one and the jar tests skip (fail under CI=true)
install: $(BIN)/.installed
	$(BIN)/python -m spark_governor.collectors.jvm.build --if-possible

demo: install
	$(BIN)/spark-governor demo

# no -q: mkdocs' --strict counts only the warnings it logs, and -q logs none
test: install
	$(BIN)/mkdocs build --strict -d site
	$(BIN)/python -m pytest -q

# the quick loop: no Spark, no servers
test-unit: install
	$(BIN)/python -m pytest -q tests/unit

bench: install
	$(BIN)/spark-governor bench overhead

clean:
	rm -rf $(VENV) bench-results .pytest_cache spark-warehouse collectors/jvm/*.jar
