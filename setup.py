"""setuptools glue: build_ext renders the selected targets, runs the one CMake/Ninja build (plugins + the nanobind
loader) and places the results in the package; build_py copies templates/ and backends/ into strata_kernels/data
so `strata-kernels generate/build` work from an installed wheel."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # import the package being built (its build driver) from the source tree

# Reproducible by default: every zip entry gets this time unless the caller sets its own.
os.environ.setdefault("SOURCE_DATE_EPOCH", "315532800")


def _copy_tree(src: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        data = Path(self.build_lib) / "strata_kernels" / "data"
        for name in ("templates", "backends"):
            _copy_tree(ROOT / name, data / name)


class CMakeBuild(build_ext):
    def run(self) -> None:
        from strata_kernels import build as sk_build

        ext = self.extensions[0]
        if self.inplace:
            pkg = ROOT / "strata_kernels"
        else:
            pkg = Path(self.get_ext_fullpath(ext.name)).parent
        build_dir = Path(os.environ.get("STRATA_KERNELS_BUILD_DIR") or (Path(self.build_temp).resolve() / "strata"))
        if self.inplace:
            build_dir = Path(os.environ.get("STRATA_KERNELS_BUILD_DIR") or (ROOT / "build" / "strata"))
        jobs = int(os.environ.get("MAX_JOBS", "0") or 0) or self.parallel or None
        log = lambda msg: print(msg, flush=True)  # noqa: E731 - pip shows these with -v
        # STRATA_GEOMETRIES="128x4,128x8": per target, one more plugin with those its table lacks, beside its own.
        result = sk_build.build(os.environ.get("STRATA_TARGETS") or "native", build_dir=build_dir,
                                install_dir=pkg / "plugins", with_loader=True, loader_dir=pkg, jobs=jobs,
                                geometries=os.environ.get("STRATA_GEOMETRIES") or None, log=log)
        if not self.inplace:  # build/lib persists between pip runs: drop plugins this build did not make
            for stale in sorted((pkg / "plugins").glob("libstrata_*.so")):
                if stale.resolve() not in {p.resolve() for p in result.built.values()}:
                    print(f"strata-kernels: removing {stale.name} of an earlier build from {stale.parent}", flush=True)
                    stale.unlink()
        for name, reason in result.skipped.items():
            print(f"strata-kernels: {name} skipped: {reason}", flush=True)
        sk_build.write_record(result, pkg / sk_build.RECORD)  # `strata-kernels info` shows it after the install


class BdistWheel(bdist_wheel):
    """The platform tag says which glibc the built shared objects need (manylinux_2_N, PEP 600) instead of
    'linux': the loader and the CPU plugin link nothing but libc, libm, libgcc_s and libstdc++."""

    def get_tag(self):
        impl, abi, plat = super().get_tag()
        if plat.startswith("linux_"):
            from strata_kernels.wheel import manylinux_tag
            sos = sorted(Path(self.bdist_dir).rglob("*.so"))
            if sos:
                plat = manylinux_tag(sos, plat[len("linux_"):])
        return impl, abi, plat


USE_ABI3 = sys.version_info >= (3, 12)

setup(
    ext_modules=[Extension("strata_kernels._loader", sources=[], py_limited_api=USE_ABI3)],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPy, "bdist_wheel": BdistWheel},
    options={"bdist_wheel": {"py_limited_api": "cp312"}} if USE_ABI3 else {},
)
