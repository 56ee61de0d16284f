#!/usr/bin/env bash
# `meson install` gives an embedder what it needs and nothing else: the
# static and shared library, the four public headers (no jansson type in
# them) and a pkg-config file; examples/embed/embed.c builds against the
# installed files alone (shared and static) and runs a sandbox.
# Usage: install.sh BUILD_DIR   (TAP on stdout; needs root for the run)
set -uo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
dest=$(mktemp -d /tmp/aj-install.XXXXXX)
trap 'rm -rf "$dest"' EXIT
n=0
t() { # description, command...
  n=$((n + 1))
  local log
  if log=$("${@:2}" 2>&1); then echo "ok $n - $1"
  else echo "not ok $n - $1: $(tail -5 <<<"$log" | tr '\n' ' ')"; fi
}
echo "1..8"
t "meson install into a DESTDIR" meson install -C "$build" --destdir "$dest" --no-rebuild --quiet
pc=$(find "$dest" -name agentjail.pc | head -1)
inc=$(find "$dest" -type d -path '*/include/agentjail' | head -1)
t "exactly the public headers are installed" \
  bash -c '[ "$(cd "'"$inc"'" && ls | tr "\n" " ")" = "agentjail.h aj_error.h aj_policy.h aj_result.h " ]'
t "no jansson (or other library) type in a public header" \
  bash -c '! grep -n "jansson\|json_t\|seccomp\.h\|nettle" "'"$inc"'"/*.h'
t "the shared library exports only aj_ symbols" \
  bash -c 'lib=$(find "'"$dest"'" -name "libagentjail.so.*.*" | head -1); [ -n "$lib" ] &&
           ! nm -D --defined-only "$lib" | awk "{print \$3}" | grep -v "^aj_\|^AGENTJAIL_"'
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
# shellcheck disable=SC2046 # pkg-config output is meant to be split
t "embed.c builds against the installed shared library" \
  cc -Wall -Werror -o "$dest/embed" "$src/examples/embed/embed.c" $(pkg-config --cflags --libs agentjail)
# shellcheck disable=SC2046
t "embed.c builds against the installed static library" \
  cc -Wall -Werror -o "$dest/embed-static" "$src/examples/embed/embed.c" \
    $(pkg-config --cflags agentjail) "$(dirname "$(dirname "$pc")")/libagentjail.a" \
    $(pkg-config --libs --static agentjail | sed 's/-lagentjail//')
libdir=$(dirname "$(dirname "$pc")")
run() { # binary: the embedder runs /bin/echo in a sandbox and reports its layers
  local out
  out=$(LD_LIBRARY_PATH=$libdir AGENTJAIL_PROBE=$build/agentjail-probe "$1" /bin/echo embedded) || return 1
  grep -q '^embedded$' <<<"$out" && grep -q 'status=ok exit_code=0 seccomp=applied' <<<"$out"
}
t "the shared embedder runs a sandbox (seccomp applied, output through)" run "$dest/embed"
t "the static embedder runs a sandbox" run "$dest/embed-static"
