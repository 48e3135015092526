#!/usr/bin/env bash
# Refreshes the console's vendored front-end modules from the npm registry (run by `make ui-vendor`): Preact, its
# hooks and htm, as the ES modules their packages publish, with the hooks' bare "preact" import pointed at the
# vendored file (the console has no bundler and no import map). Writes VERSIONS and the packages' licences beside
# them. The files are committed: building and running the daemon needs no npm and no network.
set -euo pipefail
PREACT_VERSION="${PREACT_VERSION:?}"
HTM_VERSION="${HTM_VERSION:?}"
out="$(cd "$(dirname "$0")" && pwd)/static/vendor"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "preact@${PREACT_VERSION}" "htm@${HTM_VERSION}" >/dev/null
mkdir preact htm
tar xzf "preact-${PREACT_VERSION}.tgz" -C preact
tar xzf "htm-${HTM_VERSION}.tgz" -C htm
strip_map() { sed -e 's|//# sourceMappingURL=.*||' "$@"; }
mkdir -p "$out"
strip_map preact/package/dist/preact.mjs >"$out/preact.js"
strip_map preact/package/hooks/dist/hooks.mjs | sed -e 's|from"preact"|from"./preact.js"|g' >"$out/hooks.js"
strip_map htm/package/dist/htm.mjs >"$out/htm.js"
cp preact/package/LICENSE "$out/LICENSE-preact"
cp htm/package/LICENSE "$out/LICENSE-htm"
cat >"$out/VERSIONS" <<VERSIONS
preact ${PREACT_VERSION} (MIT) dist/preact.mjs -> preact.js, hooks/dist/hooks.mjs -> hooks.js
htm ${HTM_VERSION} (Apache-2.0) dist/htm.mjs -> htm.js
VERSIONS
echo "vendored preact ${PREACT_VERSION} and htm ${HTM_VERSION} into ${out}"
