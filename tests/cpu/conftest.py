import pytest


@pytest.fixture(scope="session")
def sk():
    """The package with its CPU plugin; a missing plugin is an error here, not a skip (CI builds it)."""
    import strata_kernels
    from strata_kernels import ops
    ops.plugin_manifest(("cpu", 0))
    return strata_kernels
