"""The warm-up task's imports (collectors.executor_warmup._import_modules, run here as the executor's Python
worker would) and how the driver reads its rows (ExecutorWarmer._imports): a module that cannot be imported is
named with its error, not silently dropped. On real executors: tests/spark/test_executor_warmup_local.py."""
import logging
import sys
import threading

import pytest

from spark_governor.collectors.executor_warmup import IMPORT_FAILED_PREFIX, ExecutorWarmer, _import_modules


@pytest.fixture
def raising_module(tmp_path, monkeypatch):
    (tmp_path / "sg_raises_on_import.py").write_text("raise RuntimeError('needs a licence file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "sg_raises_on_import"
    sys.modules.pop("sg_raises_on_import", None)


def test_the_task_yields_a_row_per_module_and_names_each_failure(raising_module):
    frames = list(_import_modules(("json", "no_such_module_sg", raising_module))(iter([])))
    rows = [r for f in frames for r in f["module"]]
    assert rows[0] == "json"
    assert rows[1] == f"{IMPORT_FAILED_PREFIX}no_such_module_sg: ModuleNotFoundError: No module named 'no_such_module_sg'"
    assert rows[2] == f"{IMPORT_FAILED_PREFIX}{raising_module}: RuntimeError: needs a licence file"


def test_the_driver_keeps_the_first_error_per_module_and_warns_once(caplog):
    warmer = object.__new__(ExecutorWarmer)  # _imports reads only these two fields
    warmer._lock, warmer.import_errors = threading.Lock(), {}
    failed = f"{IMPORT_FAILED_PREFIX}mylib: ModuleNotFoundError: No module named 'mylib'"
    with caplog.at_level(logging.WARNING, logger="spark_governor.executor_warmup"):
        assert warmer._imports(["pandas", failed, "numpy"]) == ["pandas", "numpy"]
        assert warmer._imports([f"{IMPORT_FAILED_PREFIX}mylib: ImportError: other"]) == []
    assert warmer.import_errors == {"mylib": "ModuleNotFoundError: No module named 'mylib'"}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "'mylib'" in warnings[0] and "No module named" in warnings[0]
