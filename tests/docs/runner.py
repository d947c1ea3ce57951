"""Run the Python blocks of one Markdown file as ``blocks.py`` describes: in order, in one namespace, over a
store in a temporary folder, with everything they registered or imported forgotten afterwards."""

from __future__ import annotations

import contextlib
import doctest
import importlib
import importlib.util
import inspect
import io
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.db import connections
from django.test import override_settings

from queue_max_django.conf import get_config
from queue_max_django.tasks import registry
from queue_max_django.testing import run_queued

from .blocks import Block

HAS_DJANGO_TASKS = importlib.util.find_spec("django.tasks") is not None
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class BlockFailed(AssertionError):
    """A docs block that raised or whose doctest output differs; the message names the file and line."""


class SettingsFixture:
    """The ``settings`` fixture that pytest-django gives a test: attributes set here override settings
    until ``restore()``."""

    def __init__(self) -> None:
        object.__setattr__(self, "_overrides", [])

    def __setattr__(self, name: str, value: Any) -> None:
        override = override_settings(**{name: value})
        override.enable()
        self._overrides.append(override)

    def __getattr__(self, name: str) -> Any:
        from django.conf import settings

        return getattr(settings, name)

    def restore(self) -> None:
        for override in reversed(self._overrides):
            override.disable()
        self._overrides.clear()


@contextlib.contextmanager
def worker_thread() -> Iterator[None]:
    """A thread that runs what is queued, in this process, until the block ends (retries at once)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                if not run_queued(retry_delay=0):
                    stop.wait(0.005)
        except BaseException as exc:  # reported by the block, not lost in the thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=loop, name="docs-worker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        if errors:  # the thread's error explains a block that timed out waiting for it
            raise BlockFailed(f"the docs worker thread failed: {errors[0]!r}") from errors[0]


class FileRun:
    """The state shared by the blocks of one file."""

    def __init__(self, tmp_path: Path, stack: contextlib.ExitStack) -> None:
        self.tmp_path = tmp_path
        self.stack = stack
        self.modules = tmp_path / "modules"
        self.modules.mkdir()
        self.namespace: dict[str, Any] = {"__name__": "docs_example"}
        tasks_before = set(registry.names())
        sys.path.insert(0, str(self.modules))
        stack.callback(self._forget, tasks_before)
        stack.enter_context(override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "queue_max_data"}))

    def _forget(self, tasks_before: set[str]) -> None:
        sys.path.remove(str(self.modules))
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(self.modules)):
                del sys.modules[name]
        for name in set(registry.names()) - tasks_before:
            registry.unregister(name)
        importlib.invalidate_caches()

    def run(self, block: Block) -> None:
        try:
            if "file" in block.options:
                self._module(block)
            elif "settings" in block.options:
                self._settings(block)
            elif block.is_doctest:
                self._doctest(block)
            else:
                with worker_thread() if "worker" in block.options else contextlib.nullcontext():
                    self._exec(block)
                    if "pytest" in block.options:
                        self._call_tests(block)
        except BlockFailed:
            raise
        except Exception as exc:
            raise BlockFailed(f"{block.where}: {type(exc).__name__}: {exc}") from exc

    def _exec(self, block: Block, namespace: dict[str, Any] | None = None) -> None:
        code = compile("\n" * (block.line) + block.code, str(block.path), "exec")  # tracebacks: real lines
        exec(code, self.namespace if namespace is None else namespace)

    def _module(self, block: Block) -> None:
        relative = Path(block.options["file"])
        target = self.modules / relative
        for parent in reversed(target.relative_to(self.modules).parents):
            package = self.modules / parent
            package.mkdir(exist_ok=True)
            if package != self.modules and not (package / "__init__.py").exists():
                (package / "__init__.py").write_text("")
        target.write_text(block.code, encoding="utf-8")
        importlib.invalidate_caches()
        dotted = ".".join(relative.with_suffix("").parts)
        if dotted in sys.modules:
            importlib.reload(sys.modules[dotted])
        else:
            importlib.import_module(dotted)

    def _settings(self, block: Block) -> None:
        values: dict[str, Any] = {"BASE_DIR": self.tmp_path, "Path": Path}
        self._exec(block, values)
        apps = values.get("INSTALLED_APPS")
        if apps is not None and "queue_max_django" not in apps:
            raise BlockFailed(f"{block.where}: INSTALLED_APPS does not list queue_max_django")
        for name in ("QUEUE_MAX", "TASKS"):
            if name in values:
                self.stack.enter_context(override_settings(**{name: values[name]}))
        get_config()  # ImproperlyConfigured, naming the check ids, when QUEUE_MAX has errors

    def _doctest(self, block: Block) -> None:
        parser = doctest.DocTestParser()
        test = parser.get_doctest(block.code, self.namespace, block.where, str(block.path), block.line)
        out = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
        runner.run(test, out=out.write, clear_globs=False)
        if runner.failures:
            raise BlockFailed(f"{block.where}: the doctest's output differs:\n{out.getvalue()}")

    def _call_tests(self, block: Block) -> None:
        tests = [
            value for name, value in self.namespace.items() if name.startswith("test_") and callable(value)
        ]
        if not tests:
            raise BlockFailed(f"{block.where}: a `docs: pytest` block defines no test_ function")
        for index, test in enumerate(tests):
            self.namespace.pop(test.__name__)  # each test runs once, in the block that defines it
            self._call(test, self.tmp_path / f"test-{block.line}-{index}")

    def _call(self, test: Callable[..., Any], tmp_path: Path) -> None:
        settings = SettingsFixture()
        fixtures: dict[str, Callable[[], Any]] = {
            "settings": lambda: settings,
            "tmp_path": lambda: tmp_path,
        }
        tmp_path.mkdir()
        names = list(inspect.signature(test).parameters)
        unknown = [name for name in names if name not in fixtures]
        if unknown:
            raise BlockFailed(f"{test.__name__} asks for fixtures the docs runner lacks: {unknown}")
        try:
            test(**{name: fixtures[name]() for name in names})
        finally:
            settings.restore()
