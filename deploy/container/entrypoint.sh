#!/bin/sh
# The image's entrypoint.
#   (no arguments) or serve [ARGS]: agentjail serve with the server config
#       $AGENTJAIL_CONFIG (default /etc/agentjail/server.json). When
#       $AGENTJAIL_TENANTS (default /etc/agentjail/tenants/tenants.json,
#       a Kubernetes Secret) exists, its object {"NAME": {"token_sha256":
#       ...}} becomes the config's "tenants" (one kept in the config too is
#       an error: say where tenants live once). The merged file is private
#       to the server (0600, in $TMPDIR or /tmp) and read only at start.
#   run|check|probe|verify|policy|report ...: that agentjail command.
#   anything else: executed as given (sh, python3, ...).
set -eu
case "${1:-serve}" in
  serve)
    [ $# -gt 0 ] && shift
    config=${AGENTJAIL_CONFIG:-/etc/agentjail/server.json}
    tenants=${AGENTJAIL_TENANTS:-/etc/agentjail/tenants/tenants.json}
    if [ -e "$tenants" ]; then
      umask 077
      merged=$(mktemp "${TMPDIR:-/tmp}/serve-config.XXXXXX")
      python3 - "$config" "$tenants" "$merged" <<'PY'
import json, sys
config_path, tenants_path, out = sys.argv[1:]
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("agentjail-entrypoint: %s: %s" % (path, e))
config, tenants = load(config_path), load(tenants_path)
if not isinstance(config, dict) or not isinstance(tenants, dict):
    sys.exit("agentjail-entrypoint: %s and %s must each hold one JSON object" % (config_path, tenants_path))
if "tenants" in config:
    sys.exit("agentjail-entrypoint: %s has tenants and %s exists: keep tenants in one place" % (config_path, tenants_path))
config["tenants"] = tenants
with open(out, "w") as f:
    json.dump(config, f, indent=1)
PY
      config=$merged
    fi
    exec /usr/local/bin/agentjail serve --config "$config" "$@"
    ;;
  run|check|probe|verify|policy|report|--version|--help)
    exec /usr/local/bin/agentjail "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
