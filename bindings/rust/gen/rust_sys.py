#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Render fusednorm-sys's raw declarations from the public C header.

    python3 bindings/rust/gen/rust_sys.py           # rewrite fusednorm-sys/src/bindings.rs
    python3 bindings/rust/gen/rust_sys.py --check   # exit 1 if the committed file is stale

The header (api/fusednorm.h) and the version header are the one description:
opaque handle typedefs, enums with explicit values, #define'd integer
constants and the FNORM_API functions. Enums become a `c_uint` type alias plus
one constant per value (never a Rust enum: a value the library adds later must
not be undefined behaviour on the Rust side). Anything in the header this
script does not understand is an error, not a silent omission.
"""
import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEADER = ROOT / "api" / "fusednorm.h"
VERSION_HEADER = ROOT / "api" / "fusednorm_version.h"
OUTPUT = ROOT / "bindings" / "rust" / "fusednorm-sys" / "src" / "bindings.rs"

BASE_TYPES = {
    "void": "c_void",
    "char": "c_char",
    "int": "c_int",
    "float": "f32",
    "double": "f64",
    "size_t": "usize",
    "int32_t": "i32",
    "int64_t": "i64",
    "uint32_t": "u32",
}
RUST_KEYWORDS = {"type", "fn", "mod", "ref", "self", "match", "move", "box", "in", "loop", "use", "where"}


class GenError(Exception):
    pass


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse(header_text, version_text):
    src = strip_comments(header_text)
    opaque = []  # (struct tag, typedef name or None)
    for tag, name in re.findall(r"typedef\s+struct\s+(\w+)\s*\*\s*(\w+)\s*;", src):
        opaque.append((tag, name))
    for tag in re.findall(r"(?<!typedef)\s+struct\s+(\w+)\s*;", src):
        if tag not in [t for t, _ in opaque]:
            opaque.append((tag, None))
    enums = []  # (typedef name, [(const, value)])
    for body, name in re.findall(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", src, flags=re.S):
        values = []
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            m = re.fullmatch(r"(\w+)\s*=\s*(-?\d+)", item)
            if not m:
                raise GenError(f"enum {name}: value without an explicit integer: {item!r}")
            values.append((m.group(1), int(m.group(2))))
        enums.append((name, values))
    defines = []
    for text in (version_text, header_text):
        for name, value in re.findall(r"^#define\s+(FNORM_\w+)\s+(\d+)\s*$", strip_comments(text), flags=re.M):
            defines.append((name, int(value)))
    known = dict(defines)
    m = re.search(r"#define\s+FNORM_VERSION\s*\\?\s*\((.*?)\)\s*\n", strip_comments(version_text), flags=re.S)
    if m:
        expr = m.group(1).replace("\\", " ")
        if not re.fullmatch(r"[\sA-Z_0-9*+()]*", expr):
            raise GenError(f"FNORM_VERSION: unexpected expression {expr!r}")
        value = eval(re.sub(r"FNORM_\w+", lambda t: str(known[t.group(0)]), expr), {"__builtins__": {}})
        defines.append(("FNORM_VERSION", int(value)))
    functions = []
    src = re.sub(r"^[ \t]*#.*$", " ", src, flags=re.M)  # preprocessor lines (FNORM_API's own #define)
    for ret, name, params in re.findall(r"FNORM_API\s+([^;{}()]*?)\b(fnorm_\w+)\s*\(([^)]*)\)\s*;", src, flags=re.S):
        functions.append((name, c_type_to_rust(ret.strip(), name), parse_params(params, name)))
    if len(functions) != len(re.findall(r"FNORM_API\s+[^#]", src)):
        raise GenError("some FNORM_API declaration did not parse")
    return opaque, enums, defines, functions


def c_type_to_rust(ctype, where):
    ctype = " ".join(ctype.replace("*", " * ").split())
    stars = ctype.count("*")
    base = ctype.replace("*", " ").split()
    const = "const" in base
    base = [t for t in base if t != "const"]
    if base[:1] == ["struct"] and len(base) == 2:
        rust = base[1]
    elif len(base) == 1 and base[0] in BASE_TYPES:
        rust = BASE_TYPES[base[0]]
    elif len(base) == 1 and re.fullmatch(r"fnorm_\w+_t", base[0]):
        rust = base[0]
    else:
        raise GenError(f"{where}: unknown C type {ctype!r}")
    if ctype.rstrip().endswith("const") and stars:
        raise GenError(f"{where}: const pointer {ctype!r} not handled")
    for level in range(stars):
        rust = ("*const " if (const and level == 0) else "*mut ") + rust
    return rust


def parse_params(params, where):
    params = " ".join(params.split())
    if params in ("void", ""):
        return []
    out = []
    for p in params.split(","):
        p = p.strip().replace("*", " * ")
        m = re.fullmatch(r"(.*?)\b(\w+)\s*", p)
        if not m or not m.group(1).strip():
            raise GenError(f"{where}: parameter without a name: {p!r}")
        name = m.group(2)
        out.append((name + "_" if name in RUST_KEYWORDS else name, c_type_to_rust(m.group(1), f"{where}({name})")))
    return out


def render(opaque, enums, defines, functions):
    lines = [
        "// SPDX-License-Identifier: Apache-2.0",
        "// @generated by bindings/rust/gen/rust_sys.py from api/fusednorm.h and",
        "// api/fusednorm_version.h. Do not edit: run `python3 bindings/rust/gen/rust_sys.py`.",
        "",
        "use core::ffi::{c_char, c_int, c_uint, c_void};",
        "use core::marker::{PhantomData, PhantomPinned};",
        "",
        "// ---- constants ----",
    ]
    for name, value in defines:
        ty = "u32" if name.startswith("FNORM_VERSION") else "i32"
        lines.append(f"pub const {name}: {ty} = {value};")
    lines += ["", "// ---- opaque types ----"]
    for tag, name in opaque:
        lines += [
            "#[repr(C)]",
            f"pub struct {tag} {{",
            "    _data: [u8; 0],",
            "    _marker: PhantomData<(*mut u8, PhantomPinned)>,",
            "}",
        ]
        if name:
            lines.append(f"pub type {name} = *mut {tag};")
    lines += ["", "// ---- enums: a C enum is an unsigned int here; values are constants ----"]
    for name, values in enums:
        if any(v < 0 for _, v in values):
            raise GenError(f"enum {name}: negative values need c_int")
        lines.append(f"pub type {name} = c_uint;")
        for const, value in values:
            lines.append(f"pub const {const}: {name} = {value};")
    lines += ["", "// ---- functions ----", "extern \"C\" {"]
    for name, ret, params in functions:
        args = ", ".join(f"{p}: {t}" for p, t in params)
        lines.append(f"    pub fn {name}({args}) -> {ret};")
    lines += ["}", "", "// Keep the imports used whatever the header holds.", "const _: Option<(c_char, c_int)> = None;",
              "const _: Option<*const c_void> = None;", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file; exit 1 on a difference")
    ap.add_argument("--header", type=Path, default=HEADER)
    ap.add_argument("--output", type=Path, default=OUTPUT)
    args = ap.parse_args()
    try:
        text = render(*parse(args.header.read_text(), VERSION_HEADER.read_text()))
    except GenError as e:
        print(f"rust_sys.py: {e}", file=sys.stderr)
        return 2
    old = args.output.read_text() if args.output.exists() else ""
    if args.check:
        if old == text:
            print(f"{args.output.relative_to(ROOT)} matches {args.header.name}")
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                   "committed", "regenerated"))
        print(f"\n{args.output} is stale: run python3 bindings/rust/gen/rust_sys.py", file=sys.stderr)
        return 1
    if old != text:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
