#!/usr/bin/env bash
# Make a Debian 12 root filesystem with debootstrap, as a tar that
# `docker import` (or `podman import`) turns into a base image for
# deploy/Containerfile where no registry is reachable:
#
#   deploy/base-root.sh build   > build.tar   && docker import build.tar   agentjail-base-build:12
#   deploy/base-root.sh runtime > runtime.tar && docker import runtime.tar agentjail-base-runtime:12
#   docker build -f deploy/Containerfile --build-arg BASE=agentjail-base-build:12 \
#       --build-arg RUNTIME_BASE=agentjail-base-runtime:12 -t agentjail:local .
#
# build: minbase plus deploy/packages-build.txt; runtime: minbase plus
# deploy/packages-runtime.txt. The packages come from the host's apt
# mirror (debootstrap's default, or MIRROR=URL). With --cache DIR the tar
# is kept as DIR/base-KIND-HASH.tar (HASH: the package list and the
# recipe's version) and reused: the test suite caches in /var/cache/agentjail-test.
# Needs root and debootstrap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=
if [ "${1:-}" = --cache ]; then cache=$2; shift 2; fi
kind=${1:-}
case "$kind" in
  build|runtime) ;;
  *) echo "usage: $0 [--cache DIR] build|runtime > ROOT.tar" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "$0: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "$0: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
list="$here/packages-$kind.txt"
pkgs=$(grep -v '^#' "$list" | grep -v '^[[:space:]]*$' | sort | paste -sd, -)
# Bump when the recipe below changes: cached tars of another recipe are stale.
recipe=1
hash=$( (echo "recipe $recipe"; cat "$list") | sha256sum | cut -c1-16)
if [ -n "$cache" ] && [ -s "$cache/base-$kind-$hash.tar" ]; then
  cat "$cache/base-$kind-$hash.tar"
  exit 0
fi
mirror=${MIRROR:-}
if [ -z "$mirror" ]; then  # the host's bookworm mirror, as apt has it
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
           awk '/^[[:space:]]*$/{u=""} /^URIs:/{u=$2} /^Suites:/{for(i=2;i<=NF;i++) if($i=="bookworm" && u!=""){print u; exit}}')
fi
mirror=${mirror:-http://deb.debian.org/debian}
work=$(mktemp -d /tmp/ajdeploy-base-XXXXXX)
trap 'rm -rf "$work"' EXIT
log="$work/debootstrap.log"
if ! debootstrap --variant=minbase --include="$pkgs" bookworm "$work/root" "$mirror" >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "$0: debootstrap failed" >&2
  exit 1
fi
# Nothing of the build machine stays in the image: no apt lists, no
# debootstrap log, an empty resolv.conf.
rm -rf "$work/root/var/lib/apt/lists/"* "$work/root/var/cache/apt/"*.bin "$work/root/debootstrap"
: >"$work/root/etc/resolv.conf"
if [ -n "$cache" ]; then
  mkdir -p "$cache"
  tar -C "$work/root" --numeric-owner -cf "$cache/base-$kind-$hash.tar.tmp" .
  mv "$cache/base-$kind-$hash.tar.tmp" "$cache/base-$kind-$hash.tar"
  # Older tars of this kind (another package list) are stale.
  find "$cache" -maxdepth 1 -name "base-$kind-*.tar" ! -name "base-$kind-$hash.tar" -delete
  cat "$cache/base-$kind-$hash.tar"
else
  tar -C "$work/root" --numeric-owner -c .
fi
