"""What the tests share, as ordinary modules: imported by name (``from tests.support.x
import …``), never through a conftest. ``tests/conftest.py`` loads the modules that define
suite-wide fixtures and hooks as plugins (``pytest_plugins``); fixtures that belong to one
folder (and may override these there) stay in that folder's conftest.py."""
