#!/usr/bin/env bash
# Installs the npm packages of tests/deploy/package-lock.json (schemas, TypeScript, Dockerfile
# linters) into DEST/node_modules with `npm ci`, unless DEST already holds exactly that
# lock's install. The CTest fixture of the deploy tests; npm's cache makes a reinstall
# offline.   Usage: npm_install.sh DEST
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: npm_install.sh DEST}
command -v npm >/dev/null || { echo "npm_install: npm not found (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$dest"
if [[ -d "$dest/node_modules" ]] && cmp -s "$here/package-lock.json" "$dest/.installed-lock.json"; then
  echo "npm_install: $dest is up to date"
  exit 0
fi
cp "$here/package.json" "$here/package-lock.json" "$dest/"
rm -f "$dest/.installed-lock.json"
start=$(date +%s)
(cd "$dest" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error)
cp "$here/package-lock.json" "$dest/.installed-lock.json"
echo "npm_install: installed into $dest in $(( $(date +%s) - start )) s"
