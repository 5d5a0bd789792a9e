#!/usr/bin/env bash
# The programs users read as models of the API (examples/, bench/, tools/, the API guide's
# examples) use only the public API: nothing from a tessera `detail` namespace, which may
# change without notice.
#   check_public_api.sh SOURCE_ROOT
set -euo pipefail
cd "$1"
if found=$(grep -rn --include='*.cpp' --include='*.h' --include='*.md' -E '\bdetail::' \
             examples bench tools docs/api); then
  echo "uses of tessera's detail:: namespaces in user-facing code:" >&2
  echo "$found" >&2
  exit 1
fi
echo "examples, bench, tools and docs/api use the public API only"
