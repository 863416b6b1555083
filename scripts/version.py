#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print libfusednorm's version, major.minor.patch, from api/fusednorm_version.h:
the one place it is written. meson.build's project() runs this; so do the
packaging checks (pyproject's version comes from project())."""
import pathlib
import re
import sys

header = pathlib.Path(__file__).resolve().parent.parent / "api" / "fusednorm_version.h"
text = header.read_text()
parts = []
for field in ("MAJOR", "MINOR", "PATCH"):
    m = re.search(rf"^#define FNORM_VERSION_{field} (\d+)$", text, flags=re.M)
    if m is None:
        sys.exit(f"{header}: no '#define FNORM_VERSION_{field} N' line")
    parts.append(m.group(1))
print(".".join(parts))
