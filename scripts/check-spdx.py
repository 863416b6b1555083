#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every source file of the project (code, build files, scripts, templates)
carries an SPDX-License-Identifier line for the project's license near its
top. Usage: check-spdx.py [ROOT] (default: the repository holding this
script). Lists the files that lack it and exits 1; exit 0 when none does.
With --add, writes the line into them (after a shebang), in the comment
syntax of each file's language."""
import os
import subprocess
import sys

LICENSE = "SPDX-License-Identifier: Apache-2.0"
# comment syntax by file name ending
STYLES = {
    (".c", ".h", ".cpp", ".hpp", ".cu", ".cuh"): "/* {} */",
    (".rs", ".go", ".jinja"): "// {}",
    (".py", ".sh", "meson.build", "meson_options.txt", ".toml", ".in", ".cmake", "CMakeLists.txt"): "# {}",
}
SKIP_DIRS = {".git", ".tools", ".gpu", ".whl", "target", "__pycache__", "node_modules"}
# Files whose first lines are data another tool reads whole: fuzz seeds,
# committed results, lock files.
SKIP_PARTS = ("tests/fuzz/seeds/", "bench/results/", "Cargo.lock")
HEAD_LINES = 5


def style_of(path):
    name = os.path.basename(path)
    for ends, style in STYLES.items():
        if name.endswith(ends):
            return style
    if "." not in name:  # scripts named without an extension: a shebang says what they are
        try:
            with open(path, "rb") as f:
                first = f.readline()
        except OSError:
            return None
        if first.startswith(b"#!"):
            return "# {}"
    return None


def files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        listed = [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        listed = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
            listed += [os.path.relpath(os.path.join(d, n), root) for n in names]
    for rel in sorted(listed):
        if any(p in rel for p in SKIP_PARTS) or rel.split("/")[0] in SKIP_DIRS:
            continue
        path = os.path.join(root, rel)
        if os.path.isfile(path) and not os.path.islink(path):
            style = style_of(path)
            if style:
                yield rel, path, style


def has_line(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return any(LICENSE in f.readline() for _ in range(HEAD_LINES))


def add_line(path, style):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    line = style.format(LICENSE) + "\n"
    if text.startswith("#!"):
        nl = text.index("\n") + 1
        text = text[:nl] + line + text[nl:]
    else:
        text = line + text
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    args = [a for a in sys.argv[1:] if a != "--add"]
    add = "--add" in sys.argv[1:]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = []
    count = 0
    for rel, path, style in files(root):
        count += 1
        if not has_line(path):
            if add:
                add_line(path, style)
            else:
                missing.append(rel)
    for rel in missing:
        print(f"no '{LICENSE}' in the first {HEAD_LINES} lines: {rel}")
    print(f"spdx: {count} files, {len(missing)} without the line")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
