import pytest


@pytest.fixture(autouse=True)
def _private_user_dirs(tmp_path_factory, monkeypatch):
    """No test reads or writes the real per-user plugin directory (XDG_DATA_HOME): a plugin built there by hand
    would change what the resolver finds, and a test that cleans it would delete the user's plugins."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
