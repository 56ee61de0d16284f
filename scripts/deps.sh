#!/usr/bin/env bash
# Install what agentjail needs to build and test, with apt, when missing.
# Usage: scripts/deps.sh [build|test|bench|compat]   (default: test, which implies build
# and compat: scripts/test.sh runs the fast compatibility check)
# compat: what tests/compat/ measures with (CPython's test suite, the Debian
# package suites, the data-science stack, the tooling an agent uses);
# tests/compat/workloads.sh skips a step whose package apt cannot install, naming it.
set -euo pipefail
what=${1:-test}
pkgs=(meson ninja-build pkg-config gcc libc6-dev libseccomp-dev libjansson-dev nettle-dev libmicrohttpd-dev libgnutls28-dev
      libsqlite3-dev libpq-dev python3 libevent-dev libssl-dev libhttp-parser-dev)
compat=(libpython3.11-testsuite python3-pytest python3-simplejson python3-bs4 python3-pyflakes
        python3-mpmath python3-pandas python3-matplotlib python3-seaborn python3-sklearn
        python3-statsmodels python3-venv python3-pip python3-wheel python3-setuptools
        git make sqlite3 jq curl tar bsdutils openssl strace nodejs)
case "$what" in
  # debootstrap, binutils, systemd, podman, node + npm: tests/integration/test_deploy_*.py (the
  # container image's base roots, the seccomp enumeration, the unit check, the
  # Kubernetes schemas: tests/deploy/package.json, installed below with npm ci).
  # python3-requests, iproute2: tests/integration/test_egress_proxy.py.
  # postgresql: tests/integration/test_server_pg.py (a private cluster of its own).
  # e2fsprogs: the server's ext4-loop workspaces (mke2fs; test_server_sessions.py).
  test) pkgs+=(libcmocka-dev libssl-dev python3-pytest python3-requests iproute2 util-linux clang clang-tidy
               libclang-rt-14-dev chromium docker.io debootstrap binutils systemd podman postgresql e2fsprogs "${compat[@]}") ;;
  bench) pkgs+=(bubblewrap firejail python3-pandas) ;;  # python3-pandas: bench/interp.py
  compat) pkgs+=("${compat[@]}") ;;
  build) ;;
  *) echo "usage: $0 [build|test|bench|compat]" >&2; exit 2 ;;
esac
# npm for the MCP tests' client and the deploy tests' schemas (below): Debian's when the machine's nodejs has none.
if [ "$what" = test ] && ! command -v npm >/dev/null; then pkgs+=(npm); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "agentjail: missing packages: ${missing[*]} (run this script as root to install them)" >&2
    exit 1
  fi
  echo "agentjail: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "$what" = test ]; then
  # The Kubernetes schemas the deploy tests validate against: exactly the lock's versions.
  deploy_checks="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy"
  if [ ! -f "$deploy_checks/node_modules/.package-lock.json" ] ||
     ! cmp -s "$deploy_checks/package-lock.json" "$deploy_checks/node_modules/.deps-lock.json"; then
    (cd "$deploy_checks" && npm ci --no-audit --no-fund --loglevel=error >/dev/null &&
     cp package-lock.json node_modules/.deps-lock.json)
  fi
  # The MCP tests' clients: the official MCP TypeScript SDK (v1
  # @modelcontextprotocol/sdk; v2 @modelcontextprotocol/client, which speaks
  # the stateless 2026-07-28 revision), at the versions tests/mcp/package-lock.json
  # pins (npm registry).
  mcp_checks="$(cd "$(dirname "$0")/.." && pwd)/tests/mcp"
  if [ ! -d "$mcp_checks/node_modules/@modelcontextprotocol/sdk" ] ||
     ! cmp -s "$mcp_checks/package-lock.json" "$mcp_checks/node_modules/.deps-lock.json"; then
    (cd "$mcp_checks" && npm ci --no-audit --no-fund --loglevel=error >/dev/null &&
     cp package-lock.json node_modules/.deps-lock.json)
  fi
fi
