#!/usr/bin/env bash
# Configure and build. build/: release-style (warnings are errors, FORTIFY);
# build-asan/: debug with AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
setup() { # dir, options...
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
  ninja -C "$dir" >/dev/null
}
setup build --buildtype=debugoptimized -Dwerror=true -Dprefer_static=true
if [ "${1:-}" = "--with-asan" ]; then
  setup build-asan --buildtype=debug -Db_sanitize=address,undefined -Dwerror=true
fi
