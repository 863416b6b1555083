# SPDX-License-Identifier: Apache-2.0
"""The one reader of the public C header (api/fusednorm.h, and
api/fusednorm_version.h for the version constants), for every generator and
check that reads it: bindings/rust/gen/rust_sys.py, bindings/go/gen/go_shim.py,
tests/bindings/test_python.py and tests/abi/check_symbols.py.

What it reads: opaque handle typedefs (`typedef struct x *x_t;`, and bare
`struct x;` forward declarations), enums with explicit values, #define'd
integer constants (FNORM_VERSION evaluated), and the FNORM_API functions with
their parameters. Anything in those it does not understand is a HeaderError,
never a silent omission.
"""
import re
from collections import namedtuple
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "api" / "fusednorm.h"
VERSION_HEADER = ROOT / "api" / "fusednorm_version.h"

# A parameter: its C type normalized ("const int64_t *", "char **") and name.
Param = namedtuple("Param", "ctype name")
# A function: its result type (normalized), name and parameters.
Function = namedtuple("Function", "ret name params")
# An enum: the tag (`enum fnorm_status`), the typedef name (fnorm_status_t)
# and its (constant, value) pairs in order.
Enum = namedtuple("Enum", "tag name values")


class HeaderError(Exception):
    pass


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def normalize_type(ctype):
    ctype = " ".join(ctype.split())
    return re.sub(r"\s*\*", " *", ctype).replace("* *", "**").strip()


def parse_param(p):
    """'const int64_t *dims' -> Param('const int64_t *', 'dims')."""
    p = " ".join(p.split())
    m = re.fullmatch(r"((?:const\s+)?(?:struct\s+)?\w+(?:\s*\*)*\s*(?:const\s*)?(?:\s*\*)*)\s*\b(\w+)", p)
    if m is None or p == "void":
        raise HeaderError(f"cannot parse parameter {p!r}")
    return Param(normalize_type(m.group(1)), m.group(2))


def functions(header_text):
    """Every FNORM_API function, in the header's order."""
    src = re.sub(r"^[ \t]*#.*$", " ", strip_comments(header_text), flags=re.M)  # FNORM_API's own #define
    out = []
    for ret, name, params in re.findall(r"FNORM_API\s+([^;{}()]*?)\b(fnorm_\w+)\s*\(([^)]*)\)\s*;", src, flags=re.S):
        params = " ".join(params.split())
        ps = [] if params in ("", "void") else [parse_param(p) for p in params.split(",")]
        out.append(Function(normalize_type(ret), name, ps))
    if not out or len(out) != len(re.findall(r"FNORM_API\s+[^#]", src)):
        raise HeaderError("some FNORM_API declaration did not parse")
    return out


def opaque(header_text):
    """(struct tag, typedef name or None) of each opaque type."""
    src = strip_comments(header_text)
    out = [(tag, name) for tag, name in re.findall(r"typedef\s+struct\s+(\w+)\s*\*\s*(\w+)\s*;", src)]
    for tag in re.findall(r"(?<!typedef)\s+struct\s+(\w+)\s*;", src):
        if tag not in [t for t, _ in out]:
            out.append((tag, None))
    return out


def enums(header_text):
    """Every `typedef enum tag {...} name;`, each value explicit."""
    out = []
    for tag, body, name in re.findall(r"typedef\s+enum\s+(\w*)\s*\{(.*?)\}\s*(\w+)\s*;", strip_comments(header_text),
                                      flags=re.S):
        values = []
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            m = re.fullmatch(r"(\w+)\s*=\s*(-?\d+)", item)
            if not m:
                raise HeaderError(f"enum {name}: value without an explicit integer: {item!r}")
            values.append((m.group(1), int(m.group(2))))
        out.append(Enum(tag, name, values))
    return out


def enum(header_text, tag):
    """The enum whose tag is `tag` (HeaderError when there is none)."""
    for e in enums(header_text):
        if e.tag == tag:
            return e
    raise HeaderError(f"enum {tag} not in the header")


def defines(header_text, version_text):
    """(name, value) of each integer #define of the two headers, and
    FNORM_VERSION evaluated from its parts."""
    out = []
    for text in (version_text, header_text):
        for name, value in re.findall(r"^#define\s+(FNORM_\w+)\s+(\d+)\s*$", strip_comments(text), flags=re.M):
            out.append((name, int(value)))
    known = dict(out)
    m = re.search(r"#define\s+FNORM_VERSION\s*\\?\s*\((.*?)\)\s*\n", strip_comments(version_text), flags=re.S)
    if m:
        expr = m.group(1).replace("\\", " ")
        if not re.fullmatch(r"[\sA-Z_0-9*+()]*", expr):
            raise HeaderError(f"FNORM_VERSION: unexpected expression {expr!r}")
        value = eval(re.sub(r"FNORM_\w+", lambda t: str(known[t.group(0)]), expr), {"__builtins__": {}})
        out.append(("FNORM_VERSION", int(value)))
    return out
