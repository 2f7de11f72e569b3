#!/usr/bin/env bash
# Runs the repository's Dockerfile without Docker, as plain commands in a scratch directory, then
# starts the image's entry point in front of a mock worker and probes /health. CI has no Docker: this
# is how it checks that the Dockerfile's steps build an image that serves (test/deploy).
#
#   bash scripts/dockerfile-steps.sh [--dir DIR] [--offline] [--file DOCKERFILE]
#
#   --file FILE  the Dockerfile to run (default: the repository's); COPY still copies from the repository
#   --dir DIR    build in DIR (kept afterwards; each stage's filesystem is DIR/stages/<stage>);
#                default a temporary directory, removed on exit
#   --offline    npm in RUN steps uses its cache only (npm_config_offline=true), never the registry
#
# How each instruction is emulated:
#   FROM IMAGE AS NAME   a new empty filesystem DIR/stages/NAME; the host's node stands for the
#                        image's (node:* images also get /home/node, the node user's home)
#   WORKDIR, COPY        paths inside the stage are mapped under its directory; COPY takes its
#                        sources from the repository (or --from=STAGE's directory), as listed: the
#                        .dockerignore is not applied, so copy source folders, never node_modules
#   RUN                  bash -euo pipefail -c, in the working directory, with the stage's ENV;
#                        npm's cache is the stage's own /root/.npm, seeded from this machine's
#                        cache (content hard-linked, index copied), so that a RUN step such as
#                        `npm cache clean --force` cleans the stage's copy, never this machine's
#   ENV                  exported to the later RUN steps and to the started image
#   USER, EXPOSE         noted only: the steps run as the current user
#   HEALTHCHECK CMD      run as the readiness check of the started image
#   ENTRYPOINT, CMD      the last stage's entry point is started twice: `mock-worker --port P` and
#                        the gateway with `--worker-urls ... --port G` in place of CMD, as
#                        `docker run IMAGE ARGS` replaces CMD; an argument naming a path that
#                        exists in the stage is mapped under the stage's directory
# Only the exec (JSON) form of ENTRYPOINT, CMD and HEALTHCHECK CMD and the shell form of RUN are
# read; any other instruction is refused, so that the emulation never silently skips a step.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCKERFILE="$REPO/Dockerfile"
DIR=""
KEEP=0
OFFLINE=0

say() { printf 'dockerfile-steps: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir)
      [[ $# -ge 2 ]] || die "--dir needs a directory"
      DIR="$2"
      KEEP=1
      shift 2
      ;;
    --offline)
      OFFLINE=1
      shift
      ;;
    --file)
      [[ $# -ge 2 ]] || die "--file needs a Dockerfile"
      DOCKERFILE="$2"
      shift 2
      ;;
    *) die "unknown argument '$1' (usage: dockerfile-steps.sh [--dir DIR] [--offline] [--file DOCKERFILE])" ;;
  esac
done

[[ -f "$DOCKERFILE" ]] || die "no Dockerfile at $DOCKERFILE"
HOST_NPM_CACHE="$(npm config get cache)"
if [[ -z "$DIR" ]]; then DIR="$(mktemp -d)"; fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ $KEEP -eq 0 ]]; then rm -rf "$DIR"; fi
}
trap cleanup EXIT

# The elements of a JSON array of strings, one per line (an element holding a newline is refused).
json_words() {
  node -e '
    const v = JSON.parse(process.argv[1]);
    if (!Array.isArray(v) || !v.every((w) => typeof w === "string" && !w.includes("\n"))) {
      throw new Error("expected a JSON array of one-line strings");
    }
    for (const w of v) console.log(w);' "$1" || die "not an exec-form JSON array: $1"
}

# State of the stage being built.
STAGE=""
ROOTFS=""
CWD=""
declare -A STAGE_ROOT=()
STAGE_ENV=()
ENTRYPOINT=()
CMD=()
HEALTHCHECK=()

# A path inside the current stage, as a path on this machine.
in_stage() {
  if [[ "$1" == /* ]]; then printf '%s%s' "$ROOTFS" "$1"; else printf '%s/%s' "$CWD" "$1"; fi
}

# Copies SRC (a file or a folder's contents, as COPY does) to DEST; DEST ending in / is a folder.
copy_one() {
  local src="$1" dest="$2"
  [[ -e "$src" ]] || die "COPY: no such source $src"
  if [[ -d "$src" ]]; then
    mkdir -p "$dest"
    cp -a "$src/." "$dest/"
  elif [[ "$dest" == */ ]]; then
    mkdir -p "$dest"
    cp -a "$src" "$dest"
  else
    mkdir -p "$(dirname "$dest")"
    cp -a "$src" "$dest"
  fi
}

# A copy of this machine's npm cache at DEST: content files (immutable, named by their hash) are
# hard-linked, falling back to copies; the index, which npm appends to, is copied.
seed_npm_cache() {
  local dest="$1" src="$HOST_NPM_CACHE/_cacache"
  mkdir -p "$dest/_cacache"
  [[ -d "$src" ]] || return 0
  if [[ -d "$src/content-v2" ]]; then
    cp -al "$src/content-v2" "$dest/_cacache/" 2>/dev/null || cp -a "$src/content-v2" "$dest/_cacache/"
  fi
  if [[ -d "$src/index-v5" ]]; then cp -a "$src/index-v5" "$dest/_cacache/"; fi
}

do_from() {
  local words
  read -r -a words <<<"$1"
  [[ ${#words[@]} -eq 3 && "${words[1],,}" == "as" ]] || die "FROM must read 'FROM IMAGE AS NAME', got: FROM $1"
  STAGE="${words[2]}"
  ROOTFS="$DIR/stages/$STAGE"
  rm -rf "$ROOTFS"
  mkdir -p "$ROOTFS"
  STAGE_ROOT[$STAGE]="$ROOTFS"
  CWD="$ROOTFS"
  STAGE_ENV=()
  ENTRYPOINT=()
  CMD=()
  HEALTHCHECK=()
  if [[ "${words[0]}" == node:* ]]; then mkdir -p "$ROOTFS/home/node"; fi
  seed_npm_cache "$ROOTFS/root/.npm"
  say "stage $STAGE: ${words[0]} stood in for by the host's node $(node --version), in $ROOTFS"
}

do_copy() {
  local args from="" words=() dest src
  read -r -a args <<<"$1"
  for w in "${args[@]}"; do
    case "$w" in
      --from=*) from="${w#--from=}" ;;
      --chown=* | --chmod=* | --link) say "COPY $w: noted only" ;;
      --*) die "COPY: unsupported option $w" ;;
      *) words+=("$w") ;;
    esac
  done
  [[ ${#words[@]} -ge 2 ]] || die "COPY needs a source and a destination: COPY $1"
  dest="$(in_stage "${words[-1]}")"
  if [[ ${#words[@]} -gt 2 && "$dest" != */ ]]; then dest="$dest/"; fi
  for src in "${words[@]:0:${#words[@]}-1}"; do
    if [[ -n "$from" ]]; then
      [[ -n "${STAGE_ROOT[$from]:-}" ]] || die "COPY --from=$from: no such stage before this one"
      [[ "$src" == /* ]] || die "COPY --from=$from: give the source as an absolute path, got $src"
      copy_one "${STAGE_ROOT[$from]}$src" "$dest"
    else
      [[ "$src" != /* && "$src" != *..* ]] || die "COPY: a source must be inside the repository, got $src"
      copy_one "$REPO/$src" "$dest"
    fi
  done
}

do_run() {
  [[ "$1" != "["* ]] || die "RUN: only the shell form is supported, got: RUN $1"
  say "RUN $1"
  (
    cd "$CWD"
    for kv in "${STAGE_ENV[@]}"; do export "${kv?}"; done
    export npm_config_cache="$ROOTFS/root/.npm"
    if [[ $OFFLINE -eq 1 ]]; then export npm_config_offline=true; fi
    bash -euo pipefail -c "$1"
  ) || die "RUN failed in stage $STAGE: $1"
}

do_env() {
  local kv
  [[ "$1" == *=* ]] || die "ENV must read 'ENV KEY=VALUE', got: ENV $1"
  for kv in $1; do
    [[ "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*=[^\"\']*$ ]] || die "ENV: unquoted KEY=VALUE pairs only, got $kv"
    STAGE_ENV+=("$kv")
  done
}

do_healthcheck() {
  local rest="$1"
  # Options (--interval=10s ...) set Docker's timing; the check itself is what follows CMD.
  while [[ "$rest" == --* ]]; do
    rest="${rest#*[[:space:]]}"
    rest="${rest#"${rest%%[![:space:]]*}"}"
  done
  [[ "$rest" == CMD\ * ]] || die "HEALTHCHECK must end in 'CMD [...]', got: HEALTHCHECK $1"
  mapfile -t HEALTHCHECK < <(json_words "${rest#CMD }")
}

# Reads the Dockerfile into instructions: continuation lines joined, comments and blanks dropped.
instructions() {
  awk '
    /^[[:space:]]*#/ && line == "" { next }
    {
      sub(/[[:space:]]+$/, "")
      if ($0 ~ /\\$/) { line = line substr($0, 1, length($0) - 1) " "; next }
      line = line $0
      if (line ~ /[^[:space:]]/) print line
      line = ""
    }' "$DOCKERFILE"
}

while IFS= read -r line; do
  keyword="${line%%[[:space:]]*}"
  rest="${line#"$keyword"}"
  rest="${rest#"${rest%%[![:space:]]*}"}"
  [[ "${keyword^^}" == FROM || -n "$STAGE" ]] || die "the Dockerfile must start with FROM, got: $line"
  case "${keyword^^}" in
    FROM) do_from "$rest" ;;
    WORKDIR)
      CWD="$(in_stage "$rest")"
      mkdir -p "$CWD"
      ;;
    COPY) do_copy "$rest" ;;
    RUN) do_run "$rest" ;;
    ENV) do_env "$rest" ;;
    USER) say "USER $rest: noted only (the steps run as $(id -un))" ;;
    EXPOSE) say "EXPOSE $rest: noted only" ;;
    HEALTHCHECK) do_healthcheck "$rest" ;;
    ENTRYPOINT) mapfile -t ENTRYPOINT < <(json_words "$rest") ;;
    CMD) mapfile -t CMD < <(json_words "$rest") ;;
    *) die "unsupported instruction: $line" ;;
  esac
done < <(instructions)

[[ ${#ENTRYPOINT[@]} -gt 0 ]] || die "the last stage ($STAGE) has no ENTRYPOINT"
[[ ${#HEALTHCHECK[@]} -gt 0 ]] || die "the last stage ($STAGE) has no HEALTHCHECK"
say "image built: stage $STAGE; ENTRYPOINT ${ENTRYPOINT[*]}; default CMD ${CMD[*]:-(none)}"

# Arguments as the image sees them: a path that exists in the image is mapped under its directory.
map_args() {
  local w
  for w in "$@"; do
    if [[ "$w" == /* && -e "$ROOTFS$w" ]]; then printf '%s\n' "$ROOTFS$w"; else printf '%s\n' "$w"; fi
  done
}

free_port() {
  node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => {
    console.log(s.address().port); s.close(); });'
}

# Starts the image with ARGS in place of CMD, in the background, logging to FILE.
run_image() {
  local log="$1" argv
  shift
  mapfile -t argv < <(map_args "${ENTRYPOINT[@]}" "$@")
  say "docker run IMAGE $* (runs: ${argv[*]}; log $log)"
  (
    cd "$CWD"
    for kv in "${STAGE_ENV[@]}"; do export "${kv?}"; done
    export SLUICE_HEALTH_URL="$HEALTH_URL"
    exec "${argv[@]}"
  ) >"$log" 2>&1 &
  PIDS+=("$!")
}

healthcheck() {
  local argv
  mapfile -t argv < <(map_args "${HEALTHCHECK[@]}")
  (
    cd "$CWD"
    for kv in "${STAGE_ENV[@]}"; do export "${kv?}"; done
    export SLUICE_HEALTH_URL="$HEALTH_URL"
    "${argv[@]}"
  ) >/dev/null 2>&1
}

WORKER_PORT="$(free_port)"
GATEWAY_PORT="$(free_port)"
HEALTH_URL="http://127.0.0.1:$GATEWAY_PORT/health"
mkdir -p "$DIR/logs"
run_image "$DIR/logs/mock-worker.log" mock-worker --host 127.0.0.1 --port "$WORKER_PORT"
run_image "$DIR/logs/gateway.log" --worker-urls "http://127.0.0.1:$WORKER_PORT" --host 127.0.0.1 \
  --port "$GATEWAY_PORT"

# The image's own HEALTHCHECK decides readiness, as Docker's health status would.
deadline=$((SECONDS + 60))
until healthcheck; do
  for pid in "${PIDS[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$DIR"/logs/*.log >&2 || true
      die "a started process (pid $pid) exited before the healthcheck passed"
    fi
  done
  if [[ $SECONDS -ge $deadline ]]; then
    tail -n 20 "$DIR"/logs/*.log >&2 || true
    die "the healthcheck did not pass within 60 s ($HEALTH_URL)"
  fi
  sleep 0.5
done
body="$(node -e 'fetch(process.argv[1]).then(async (r) => {
  const text = await r.text(); console.log(`${r.status} ${text.trim()}`); process.exit(r.ok ? 0 : 1); });' \
  "$HEALTH_URL")" || die "GET $HEALTH_URL answered $body"
say "healthcheck passed; GET $HEALTH_URL -> $body"
echo "serves /health: $body"
