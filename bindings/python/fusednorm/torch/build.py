# SPDX-License-Identifier: Apache-2.0
"""Build the drop-in's C++ ops (every csrc/*.cpp) for the PyTorch installed here:

    python -m fusednorm.torch.build [--dest DIR]

A wheel built where PyTorch was importable already holds them; otherwise run
this once after installing (and again after changing PyTorch's version). It
needs a C++ compiler and the CUDA toolkit's headers (CUDA_HOME), as PyTorch's
extension builder does, and writes `fusednorm_torch_ops<suffix>` into the
package (or, if that is read-only, into the per-user cache that
`import fusednorm.torch` also searches; --dest picks another directory, for
FNORM_TORCH_OPS). `import fusednorm.torch` itself never compiles.

`--meson-flags` prints what the Meson build compiles the same ops with (one
item a line: PyTorch's version, the C++ standard, then -I/-D/-L/-l flags);
`--sources` the files it compiles and installs (csrc/*.cpp, csrc/*.hpp),
relative to this directory: one file per op, so a new op's file drops in.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile

NAME = "fusednorm_torch_ops"
HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")


def sources() -> list[str]:
    """The ops' translation units: every csrc/*.cpp (ops.cpp, one per op)."""
    return sorted(glob.glob(os.path.join(CSRC, "*.cpp")))


def headers() -> list[str]:
    return sorted(glob.glob(os.path.join(CSRC, "*.hpp")))


def api_dir() -> str:
    """The directory holding fusednorm.h: FNORM_INCLUDE_DIR, the wheel's
    fusednorm/include, or the source tree's api/."""
    pkg = os.path.dirname(HERE)
    for cand in (os.environ.get("FNORM_INCLUDE_DIR"), os.path.join(pkg, "include"),
                 os.path.join(pkg, "..", "..", "..", "api")):
        if cand and os.path.isfile(os.path.join(cand, "fusednorm.h")):
            return os.path.abspath(cand)
    raise FileNotFoundError("fusednorm.h not found (not in the package's include/ nor a source tree's api/): "
                            "set FNORM_INCLUDE_DIR to the directory holding it")


def cache_dir(torch_version: str) -> str:
    """The per-user directory for ops built against `torch_version`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fusednorm", f"torch-{torch_version}-{sys.implementation.cache_tag}")


def module_file() -> str:
    return NAME + importlib.machinery.EXTENSION_SUFFIXES[0]


def stamp(torch_version: str) -> dict:
    """What a built extension is valid for; written beside it."""
    from .. import _core
    h = hashlib.sha256()
    for path in sources() + headers():
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read())
    src = h.hexdigest()[:16]
    return {"torch": torch_version, "fusednorm": ".".join(map(str, _core.version())), "ops_source": src}


def meson_flags() -> int:
    try:
        import torch
        from torch.utils import cpp_extension
    except Exception as e:  # noqa: BLE001 - any import failure: no PyTorch to build against
        print(f"PyTorch is not importable: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    import inspect
    std = "c++20" if "-std=c++20" in inspect.getsource(cpp_extension) else "c++17"
    lines = [torch.__version__, std]
    lines += ["-I" + p for p in cpp_extension.include_paths()]
    lines.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    abi = getattr(cpp_extension, "_get_pybind11_abi_build_flags", None)
    if abi is not None:
        lines += [f.replace('"', "") for f in abi()]
    lines += ["-L" + p for p in cpp_extension.library_paths()]
    lines += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10_cuda", "-ltorch_cuda"]
    print("\n".join(lines))
    return 0


# PyTorch's extension builder loads what it built: in this process the
# package may already hold the ops (registered once per process: a second
# registration of the namespace aborts), so it runs in a fresh interpreter.
_COMPILE = """
import json, sys
from torch.utils import cpp_extension
a = json.loads(sys.argv[1])
cpp_extension.load(name=a["name"], sources=a["sources"], extra_include_paths=[a["include"]], extra_cflags=["-O2"],
                   with_cuda=True, is_python_module=True, build_directory=a["dir"], verbose=a["verbose"])
"""


def build(dest: str | None, verbose: bool) -> str:
    """Compile the ops with PyTorch's extension builder and install them into
    `dest` (default: the package, else the cache). Returns the file written."""
    import subprocess

    import torch
    # The ops have no device code: any arch list spares the builder a device
    # query (which fails without a GPU).
    env = dict(os.environ)
    env.setdefault("TORCH_CUDA_ARCH_LIST", "8.0")
    with tempfile.TemporaryDirectory(prefix="fusednorm-ops-") as tmp:
        args = {"name": NAME, "sources": sources(), "include": api_dir(), "dir": tmp, "verbose": verbose}
        r = subprocess.run([sys.executable, "-c", _COMPILE, json.dumps(args)], env=env)
        if r.returncode != 0:
            raise RuntimeError(f"building the ops failed (PyTorch's extension builder exited with {r.returncode})")
        built = os.path.join(tmp, NAME + ".so")
        targets = [dest] if dest else [HERE, cache_dir(torch.__version__)]
        for d in targets:
            try:
                os.makedirs(d, exist_ok=True)
                out = os.path.join(d, module_file())
                shutil.copyfile(built, out + ".tmp")
                os.replace(out + ".tmp", out)
                with open(os.path.join(d, NAME + ".json"), "w") as f:
                    json.dump(stamp(torch.__version__), f)
                return out
            except OSError as e:
                last = e
        raise OSError(f"could not write the ops into {targets}: {last}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusednorm.torch.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", help="directory to write the ops into (then point FNORM_TORCH_OPS at the file)")
    ap.add_argument("--verbose", action="store_true", help="show the compiler's commands")
    ap.add_argument("--meson-flags", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sources", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.meson_flags:
        return meson_flags()
    if a.sources:
        print("\n".join(os.path.relpath(p, HERE) for p in sources() + headers()))
        return 0
    try:
        out = build(a.dest, a.verbose)
    except (RuntimeError, OSError) as e:
        print(f"fusednorm.torch ops not built: {e}", file=sys.stderr)
        return 1
    print(f"fusednorm.torch ops built: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
