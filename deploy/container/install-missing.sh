#!/bin/sh
# install-missing.sh LIST: apt-get install the packages of LIST (one a
# line, # comments) that this root lacks; nothing (and no network) when it
# has them all, as a base made by deploy/base-root.sh does.
set -eu
missing=
for p in $(grep -v '^#' "$1"); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
apt-get clean
rm -rf /var/lib/apt/lists/*
