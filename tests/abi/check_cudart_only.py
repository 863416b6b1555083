#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""libfusednorm needs the CUDA runtime and nothing else from NVIDIA.

1. Its dynamic section NEEDs libcudart and no cuDNN, NCCL or cuBLAS(Lt).
2. PROGRAM (a LayerNorm-only C program) runs with a loader path holding only
   libfusednorm, libcudart and the driver (libcuda, when the machine has
   one): the loader started with --inhibit-cache --library-path DIR, so
   nothing in the loader cache (where CUDA's other libraries usually are) can
   be found, and LD_DEBUG=files lists every library the process loaded, at
   start or later by dlopen. None may be cuDNN, NCCL or cuBLAS(Lt).
Without a GPU the program exits 77 after fnorm_create; the loader check has
run all the same, and the output says LayerNorm did not run.
With --absent, PROGRAM (tests/host/test_build_support.cpp) runs as `PROGRAM
--absent` on the same loader path and its exit status is the result: there
the optional libraries cannot be found at all.
Usage: check_cudart_only.py [--absent] LIBFUSEDNORM PROGRAM CUDA_LIB_DIR...
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

FORBIDDEN = re.compile(r"lib(cudnn|nccl|cublas)")


def elf_field(args, pattern, path):
    out = subprocess.run(["readelf", *args, path], capture_output=True, text=True, check=True).stdout
    return re.findall(pattern, out)


def main():
    args = sys.argv[1:]
    absent = args[0] == "--absent"
    if absent:
        args = args[1:]
    lib, program, *cuda_dirs = args
    if shutil.which("readelf") is None:
        print("readelf (binutils) not found")
        return 99
    needed = elf_field(["-d"], r"\(NEEDED\)\s+Shared library: \[(.+?)\]", lib)
    print("libfusednorm NEEDED:", " ".join(needed))
    bad = [n for n in needed if FORBIDDEN.search(n)]
    cudart = [n for n in needed if n.startswith("libcudart.so")]
    if bad or len(cudart) != 1:
        print(f"FAIL: libfusednorm must need libcudart and no cuDNN/NCCL/cuBLAS: {needed}")
        return 1
    soname = elf_field(["-d"], r"\(SONAME\)\s+Library soname: \[(.+?)\]", lib)[0]

    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.realpath(lib), os.path.join(d, soname))
        found = [os.path.join(c, cudart[0]) for c in cuda_dirs if os.path.exists(os.path.join(c, cudart[0]))]
        if not found:
            print(f"{cudart[0]} not found in {cuda_dirs}")
            return 99
        os.symlink(os.path.realpath(found[0]), os.path.join(d, cudart[0]))
        # The driver is not a library the application ships: take it from
        # wherever the loader cache has it.
        ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
        cache = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout if os.path.exists(ldconfig) else ""
        m = re.search(r"\blibcuda\.so\.1 \(libc6,x86-64\) => (\S+)", cache)
        driver = m.group(1) if m else None
        for p in os.environ.get("LD_LIBRARY_PATH", "").split(":"):  # containers put it there
            if driver is None and p and os.path.exists(os.path.join(p, "libcuda.so.1")):
                driver = os.path.join(p, "libcuda.so.1")
        if driver:
            os.symlink(os.path.realpath(driver), os.path.join(d, "libcuda.so.1"))
        interp = elf_field(["-l"], r"program interpreter: (\S+?)\]", program)[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
        env["LD_DEBUG"] = "files"
        env["LD_DEBUG_OUTPUT"] = os.path.join(d, "ld")
        r = subprocess.run([interp, "--inhibit-cache", "--library-path", d, program]
                           + (["--absent"] if absent else []),
                           capture_output=True, text=True, env=env)
        loaded = set()
        for name in os.listdir(d):
            if name.startswith("ld."):
                with open(os.path.join(d, name)) as f:
                    loaded.update(re.findall(r"file=(\S+) \[\d+\];\s+generating link map", f.read()))
    print(r.stdout.strip())
    if r.stderr.strip():
        print(r.stderr.strip())
    print("loaded:", " ".join(sorted(loaded)))
    if absent:
        return r.returncode
    bad = sorted(n for n in loaded if FORBIDDEN.search(os.path.basename(n)))
    if bad:
        print(f"FAIL: loaded {bad}")
        return 1
    if r.returncode == 77:
        print("loader check passed with only libfusednorm and libcudart on the path; "
              "no GPU here, so LayerNorm did not run")
        return 0
    if r.returncode != 0:
        print(f"FAIL: {program} exited {r.returncode}")
        return 1
    print("LayerNorm ran with only libfusednorm, libcudart and the driver on the loader path; "
          "no cuDNN, NCCL or cuBLAS loaded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
