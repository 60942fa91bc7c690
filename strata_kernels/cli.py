"""`strata-kernels`: info · explain · generate · build · clean · wheel · parity · bench."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import __version__
from .errors import StrataError


def _cmd_info(args: argparse.Namespace) -> int:
    from . import build, resolve, targets, toolchains
    from .paths import user_plugin_dir
    print(f"strata-kernels {__version__} (Python {sys.version.split()[0]})")
    print(f"package:   {targets.package_root()}")
    print(f"data:      {targets.data_root()}")
    print(f"user plugins: {user_plugin_dir()} (`strata-kernels build` installs here; `strata-kernels clean` "
          "removes it)")
    print("toolchains:")
    found = {}
    for name, finder in (("host C++", toolchains.host_cxx), ("nvcc", toolchains.nvcc),
                         ("HIP clang", toolchains.hip_clang)):
        tc = finder()
        found[name] = tc
        state = f"{tc.version or '?'} at {tc.path}" if tc.available else f"not available: {tc.reason}"
        print(f"  {name:<10} {state}")
    print(f"  {'SYCL':<10} {toolchains.describe_sycl(toolchains.sycl())}")
    print("plugins:")
    plugins = resolve.find_plugins()
    if not plugins:
        print("  none installed")
    for p in plugins:
        m = p.manifest or {}
        geoms = ", ".join(f"{hd}x{g}" for hd, g in resolve.plugin_geometries(p))
        what = (f"{m.get('target')} ({m.get('backend')}; variants {', '.join(m.get('variants', []))}; geometries "
                f"{geoms})" if m else p.error)
        print(f"  {p.path}  [{p.source}]  {what}")
    print("builds:")
    records = [("pip install", targets.package_root() / build.RECORD),
               ("strata-kernels build", user_plugin_dir() / build.RECORD)]
    for what, path in records:
        rec = build.read_record(path)
        if rec is None:
            print(f"  {what}: no record ({path})")
            continue
        extra = [f"ISA only: {', '.join(rec['isa_only'])}"] if rec.get("isa_only") else []
        extra += [f"header checks only: {', '.join(rec['checked_only'])}"] if rec.get("checked_only") else []
        print(f"  {what}: asked for {rec['spec']!r}; built {', '.join(rec['built']) or 'nothing'}"
              + "".join(f"; {e}" for e in extra))
        for note in rec.get("notes", []):
            print(f"    {note}")
        for name, reason in rec.get("skipped", {}).items():
            print(f"    skipped {name}: {reason}")
    have_gpu_plugin = any((p.manifest or {}).get("backend") in ("cuda", "hip", "sycl") for p in plugins)
    gpu_tcs = [f"{n} {found[n].version or ''}".strip() for n in ("nvcc", "HIP clang") if found[n].available]
    if gpu_tcs and not have_gpu_plugin:
        print(f"no GPU plugin is installed, but {' and '.join(gpu_tcs)} can build some: name the targets, e.g. "
              "`strata-kernels build --targets sm_86` (into the user directory) or "
              "`STRATA_TARGETS=\"cpu;sm_86\" pip install .` (docs/building.md)")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from .resolve import explain, probe_devices, resolve, simulate
    print(explain(simulate=args.simulate))
    if args.strict:
        devices = simulate(args.simulate) if args.simulate else probe_devices()
        missing = [r.device.describe() for r in resolve(devices) if r.chosen is None]
        if missing:
            print(f"strata-kernels: no plugin for {len(missing)} device(s): {'; '.join(missing)}", file=sys.stderr)
            return 4
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from . import build, codegen, targets
    sels = []
    for spec in args.target:
        sels.extend(targets.parse_target_list(spec, native=["cpu"]))
    sels = build.with_geometries(sels, args.geometries, table_plugins=not args.geometries)
    out = Path(args.out)
    t0 = time.monotonic()
    rendered = codegen.generate(sels, out)
    for r in rendered:
        print(f"{r.name}: {len(r.sources)} source(s) in {r.directory}")
    print(f"CMake project: {out / 'CMakeLists.txt'} ({time.monotonic() - t0:.2f} s)")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from . import build
    res = build.build(args.targets, build_dir=Path(args.build_dir) if args.build_dir else None,
                      install_dir=Path(args.out) if args.out else None, jobs=args.jobs,
                      geometries=args.geometries, table_plugins=not args.geometries)
    isa = f", {len(res.isa_only)} to ISA only" if res.isa_only else ""
    isa += f", {len(res.checked_only)} checked against headers only" if res.checked_only else ""
    print(f"built {len(res.built)} plugin(s){isa}, skipped {len(res.skipped)} in {res.seconds:.1f} s"
          + (" (up to date)" if res.up_to_date else ""))
    if args.out:
        if res.built:
            print(f"add {args.out} to STRATA_KERNELS_PLUGIN_PATH to use these plugins")
    else:
        from .paths import user_plugin_dir
        build.write_record(res, user_plugin_dir() / build.RECORD)
        if res.built:
            print(f"installed into {user_plugin_dir()}, which the resolver searches (`strata-kernels clean` "
                  "removes it)")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    import os
    import shutil
    from .paths import cache_home, data_home
    victims = [(data_home(), "plugins built by `strata-kernels build`")]
    if not args.keep_cache:
        victims.append((cache_home(), "build directories"))
    removed = 0
    for path, what in victims:
        if not path.exists():
            print(f"{path}: not there ({what})")
            continue
        if not args.dry_run:
            shutil.rmtree(path)
        removed += 1
        print(f"{'would remove' if args.dry_run else 'removed'} {path} ({what})")
    env = os.environ.get("STRATA_KERNELS_BUILD_DIR")
    if env and not args.keep_cache:
        print(f"left {env} alone (STRATA_KERNELS_BUILD_DIR names it; remove it yourself)")
    if not removed:
        print("nothing to remove")
    return 0


def _cmd_wheel(args: argparse.Namespace) -> int:
    from . import wheel
    wheel.family_targets(args.family)                    # an unknown family is the first thing to say
    if not args.out:
        raise ValueError("wheel: --out DIR is required (the directory for the wheel and its size report)")
    res = wheel.build_family_wheel(args.family, Path(args.out), targets=args.targets,
                                   build_dir=Path(args.build_dir) if args.build_dir else None, jobs=args.jobs)
    if res.wheel is None:
        print(f"strata-kernels: no wheel for family {args.family}: {res.skipped}", file=sys.stderr)
        return 3
    return 0


_GEOMETRIES_HELP = ("(head_dim, G) pairs the targets' tables lack, e.g. '128x4,128x8': one more plugin per target with "
                     "just those (libstrata_<target>-128x4-128x8.so), beside the table's plugin, which the resolver "
                     "still uses for its own geometries; head_dim 64, 128, 192 or 256, G 1..16")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata-kernels", description="QSA attention kernels: build, inspect, verify.")
    p.add_argument("--version", action="version", version=f"strata-kernels {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("info", help="versions, toolchains and installed plugins")
    s.set_defaults(func=_cmd_info)

    s = sub.add_parser("explain", help="which plugin serves each device, and why the others do not")
    s.add_argument("--simulate", metavar="DEVICES", help="comma-separated devices to simulate, e.g. sm_86,gfx1100")
    s.add_argument("--strict", action="store_true", help="exit with status 4 when a device gets no plugin (for CI)")
    s.set_defaults(func=_cmd_explain)

    s = sub.add_parser("generate", help="render a target's source tree (no compiler needed)")
    s.add_argument("--target", action="append", required=True, metavar="T",
                   help="target(s): 'sm_90', 'cpu;gfx1100', 'all' (repeatable)")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--geometries", default=None, metavar="HDxG,...", help=_GEOMETRIES_HELP)
    s.set_defaults(func=_cmd_generate)

    s = sub.add_parser("build", help="compile plugins (one CMake configure, one Ninja run)")
    s.add_argument("--targets", default=None,
                   help="'cpu;sm_80;sm_90+PTX;gfx1100', 'all', 'native' or TORCH_CUDA_ARCH_LIST syntax "
                        "(default: $STRATA_TARGETS or native)")
    s.add_argument("--out", default=None, help="install the plugins here (default: the per-user plugin directory, "
                                               "which the resolver searches; see `strata-kernels info`)")
    s.add_argument("--build-dir", default=None, help="build directory (default: ~/.cache/strata-kernels/...)")
    s.add_argument("-j", "--jobs", type=int, default=None, help="parallel compile jobs (default: $MAX_JOBS or all cores)")
    s.add_argument("--geometries", default=None, metavar="HDxG,...", help=_GEOMETRIES_HELP)
    s.set_defaults(func=_cmd_build)

    s = sub.add_parser("clean", help="remove the plugins `build` made and the build cache (run before pip uninstall)")
    s.add_argument("--keep-cache", action="store_true", help="keep the build directories (~/.cache/strata-kernels)")
    s.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    s.set_defaults(func=_cmd_clean)

    s = sub.add_parser("wheel", help="build a plugin family's targets and package them as a wheel")
    s.add_argument("--family", required=True, help="cuda13, cuda12, rocm or sycl (the families of backends/*.toml)")
    s.add_argument("--targets", default=None, help="build only this subset of the family, e.g. 'sm_89'")
    s.add_argument("--out", help="directory for the wheel and its size report (required)")
    s.add_argument("--build-dir", default=None,
                   help="build directory (default: ~/.cache/strata-kernels/wheel-<version>-<family>; the same "
                        "directory gives byte-identical wheels)")
    s.add_argument("-j", "--jobs", type=int, default=None, help="parallel compile jobs (default: $MAX_JOBS or all cores)")
    s.set_defaults(func=_cmd_wheel)

    from . import bench, parity
    s = sub.add_parser("parity", help="the parity test of docs/verification.md against the FP64 reference")
    parity.add_arguments(s)
    s.set_defaults(func=parity.run)

    from . import bench_overhead
    s = sub.add_parser("bench", help="time the plugin against numpy/torch baselines on the same inputs "
                                     "(--overhead: the host time per call)")
    bench.add_arguments(s)
    bench_overhead.add_arguments(s)
    s.set_defaults(func=lambda a: (bench_overhead.run if a.overhead else bench.run)(a))
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (StrataError, ValueError) as e:
        print(f"strata-kernels: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("strata-kernels: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
