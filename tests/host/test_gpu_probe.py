#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/gpu-probe and the scripts that need a GPU, with a made-up
nvidia-smi first on PATH (no GPU needed; issue 42): a missing nvidia-smi
(status 127), one that fails as on a machine whose driver cannot reach a GPU
(exit 9, the complaint on stdout), and one listing one or two GPUs. The probe
exits 0 and never takes nvidia-smi's complaint for an arch; gpu-check,
gpu-sanitize and syncbn-scaling say why they cannot run and exit 77 before
building anything. No script runs nvidia-smi in a command substitution except
gpu-probe (`$(nvidia-smi ... | head -1)` under `set -euo pipefail` ended
scripts/demo.sh with 127 and no message). scripts/demo.sh itself is run by
.ci/run on a machine without nvidia-smi."""
import os
import re
import shutil
import signal
import subprocess
import tempfile

from checks import ROOT, check, finish  # tests/host/checks.py

PROBE = os.path.join(ROOT, "scripts", "gpu-probe")
DRIVER_FAIL = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")
H100_L = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"


def stub(d, name, query_out, list_out, rc=0):
    """A directory holding an nvidia-smi that prints query_out for
    --query-gpu, list_out for -L, and exits rc."""
    sd = os.path.join(d, name)
    os.makedirs(sd)
    path = os.path.join(sd, "nvidia-smi")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                'case "$1" in\n'
                "  -L) cat <<'EOF'\n%s\nEOF\n;;\n"
                "  *) cat <<'EOF'\n%s\nEOF\n;;\n"
                "esac\n"
                "exit %d\n" % (list_out, query_out, rc))
    os.chmod(path, 0o755)
    return sd


def run(cmd, smi_dir, timeout=60):
    env = dict(os.environ)
    if smi_dir is not None:
        env["PATH"] = smi_dir + os.pathsep + env.get("PATH", "")
    # A session of its own: a script that went on to build is killed whole.
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None, "", "timed out after %d s (did it start building?)" % timeout
    return p.returncode, out, err


def probe(what, smi_dir):
    rc, out, err = run(["bash", PROBE, what], smi_dir)
    return rc, out.strip(), err


with tempfile.TemporaryDirectory() as d:
    missing = os.path.join(d, "missing")
    os.makedirs(missing)
    with open(os.path.join(missing, "nvidia-smi"), "w") as f:  # what the shell does for a missing command
        f.write("#!/bin/sh\necho 'nvidia-smi: not found' >&2\nexit 127\n")
    os.chmod(os.path.join(missing, "nvidia-smi"), 0o755)
    cases = {
        "missing": (missing, "", "0", "nvidia-smi not found"),
        "driver failing": (stub(d, "fail", DRIVER_FAIL, DRIVER_FAIL, rc=9), "", "0",
                           "nvidia-smi failed (exit 9): NVIDIA-SMI has failed"),
        "one H100": (stub(d, "h100", "9.0", H100_L), "90", "1", ""),
        "two GPUs and MIG instances": (stub(d, "two", "12.0\n9.0",
                                            "GPU 0: NVIDIA RTX PRO 6000 (UUID: GPU-1)\n"
                                            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
                                            "  MIG 1g.10gb     Device  0: (UUID: MIG-3)"), "120", "2", ""),
        "no compute capability": (stub(d, "na", "[N/A]", H100_L), "", "1", ""),
    }
    if shutil.which("nvidia-smi") is None:  # this machine has none: the real thing too
        cases["missing (this machine)"] = (None, "", "0", "nvidia-smi not found")
    for name, (sd, arch, count, reason) in cases.items():
        for what, want in (("arch", arch), ("count", count)):
            rc, out, err = probe(what, sd)
            check(rc == 0 and out == want, f"{name}: gpu-probe {what} -> {out!r}, exit {rc} (want {want!r}, 0) {err.strip()}")
        rc, out, err = probe("reason", sd)
        check(rc == 0 and (out.startswith(reason) if reason else out == ""),
              f"{name}: gpu-probe reason -> {out!r}, exit {rc}")
    rc, out, err = probe("", None)
    check(rc == 2 and "usage" in err, f"gpu-probe with no argument: exit {rc}, {err.strip()!r}")

    # The GPU scripts: a clear line and 77 before any build.
    fail_dir = os.path.join(d, "fail")
    one_dir = os.path.join(d, "h100")
    out_dir = os.path.join(d, "out")
    env_build = os.path.join(d, "build")  # gpu-sanitize's build, should it get that far
    os.environ["FNORM_SANITIZE_BUILD"] = env_build
    for cmd, sd, want in (
        (["scripts/gpu-check", out_dir, "--tests-only"], fail_dir, "gpu-check: no usable GPU here (nvidia-smi failed (exit 9)"),
        (["scripts/gpu-check", out_dir], missing, "gpu-check: no usable GPU here (nvidia-smi not found"),
        (["scripts/gpu-sanitize", out_dir], fail_dir, "gpu-sanitize: SKIP: 0 GPU(s) visible (nvidia-smi failed (exit 9)"),
        (["scripts/gpu-sanitize", out_dir, "--two-gpus"], one_dir, "gpu-sanitize --two-gpus: SKIP: 1 GPU(s) visible, SyncBatchNorm needs 2"),
        (["scripts/syncbn-scaling", out_dir], missing, "syncbn-scaling: SKIP: 0 GPU(s) visible (nvidia-smi not found"),
    ):
        rc, out, err = run(["bash", os.path.join(ROOT, cmd[0])] + cmd[1:], sd)
        text = out + err
        check(rc == 77 and want in text, f"{' '.join(cmd[:1] + cmd[2:])} with nvidia-smi {os.path.basename(sd)}: "
              f"exit {rc}, {text.strip()[-300:]!r}")

# No script runs nvidia-smi in a command substitution but gpu-probe.
pattern = re.compile(r"\$\(\s*nvidia-smi")
offenders = []
for top in ("scripts", ".ci", "tests", "bindings", "bench"):
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
        dirnames[:] = [x for x in dirnames if x not in ("target", "__pycache__", "node_modules")]
        for fn in filenames:
            p = os.path.join(dirpath, fn)
            if p == PROBE or not (fn.endswith(".sh") or "." not in fn):
                continue
            try:
                text = open(p, errors="replace").read()
            except OSError:
                continue
            if pattern.search(text):
                offenders.append(os.path.relpath(p, ROOT))
check(not offenders, "no `$(nvidia-smi ...)` outside scripts/gpu-probe" + (f": {offenders}" if offenders else ""))

finish("gpu-probe")
