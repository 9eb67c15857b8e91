#!/usr/bin/env bash
# Build gangrun's container images on this machine, without Docker and without an image registry:
#
#   1. a base root filesystem from Debian packages (debootstrap --variant=minbase, Python 3 and venv,
#      docs and locales trimmed), cached outside the clone and keyed by its inputs, committed into
#      buildah as localhost/gangrun-base:<key>;
#   2. the project's Dockerfile built on that base by buildah (--build-arg BASE=...), tagged
#      localhost/gangrun:dev; only PyPI is reached, for the wheel's dependencies;
#   3. a pause image (the pod sandbox): a static C program in an empty image, localhost/pause:gangrun;
#   4. both exported as docker-archive tarballs, which `--import SOCKET` loads into the k8s.io
#      namespace of the containerd listening on SOCKET (the real node does this when it starts).
#
#   5. with --flyte, a second project image from the same Dockerfile with the flyte extra
#      (--build-arg EXTRAS=kubernetes,s3,flyte), localhost/gangrun-flyte:dev, exported beside the others:
#      the Flyte connector's image and the base of a Flyte task's (tests/e2e/test_realnode_flyte.py).
#
# Usage:
#   hack/build-images.sh                  build what is missing; print the timing and the image size
#   hack/build-images.sh --print-dir      print the folder holding the tarballs and exit
#   hack/build-images.sh --import SOCKET  build what is missing, then import into that containerd
#   hack/build-images.sh --flyte [...]    the gangrun-flyte image too (with either of the above)
#
# Environment (all optional):
#   GANGRUN_IMAGE_CACHE     cache root (default: $HOME/.cache/gangrun/images)
#   GANGRUN_DEBIAN_MIRROR   Debian mirror for debootstrap (default: the first Debian URI in apt's sources)
#   GANGRUN_IMAGE           the tag of the project image (default: localhost/gangrun:dev)
#   GANGRUN_FLYTE_IMAGE     the tag of the image with the flyte extra (default: localhost/gangrun-flyte:dev)
#
# Needs root and Debian's debootstrap, buildah and gcc (with static libc); they are installed with
# apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
CACHE=${GANGRUN_IMAGE_CACHE:-$HOME/.cache/gangrun/images}
IMAGE=${GANGRUN_IMAGE:-localhost/gangrun:dev}
PAUSE_IMAGE=localhost/pause:gangrun
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates
OUT="$CACHE/out"

FLYTE_IMAGE=${GANGRUN_FLYTE_IMAGE:-localhost/gangrun-flyte:dev}
IMPORT_SOCKET= WITH_FLYTE=
while [ $# -gt 0 ]; do
  case "$1" in
    --print-dir) echo "$OUT"; exit 0 ;;
    --import) [ -n "${2:-}" ] || { echo "usage: $0 --import SOCKET" >&2; exit 2; }; IMPORT_SOCKET=$2; shift ;;
    --flyte) WITH_FLYTE=1 ;;
    *) echo "usage: $0 [--flyte] [--print-dir|--import SOCKET]" >&2; exit 2 ;;
  esac
  shift
done

need_packages() {
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v buildah >/dev/null || missing+=(buildah)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || missing+=(libc6-dev)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "build-images: installing ${missing[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "error: missing ${missing[*]} (install them with apt-get as root)" >&2; exit 1
  fi
}

debian_mirror() {
  # The first Debian archive in apt's sources (one-line and deb822 formats), not the security archive.
  if [ -n "${GANGRUN_DEBIAN_MIRROR:-}" ]; then echo "$GANGRUN_DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
    | tr ' ' '\n' | grep -E '/debian/?$' | head -n1 || true)
  [ -n "$uri" ] || { echo "error: no Debian mirror in apt's sources; set GANGRUN_DEBIAN_MIRROR" >&2; exit 1; }
  echo "${uri%/}"
}

if [ "$(id -u)" != 0 ]; then echo "error: building images with buildah and debootstrap needs root" >&2; exit 1; fi
need_packages
# buildah's CNI networking creates a bridge the first time a build step joins a network; nothing here
# needs it (the build runs with --network host), and a build must leave the host as it found it.
if ! ip link show cni-podman0 >/dev/null 2>&1; then
  trap 'ip link delete cni-podman0 2>/dev/null || true' EXIT
fi
mkdir -p "$OUT" "$CACHE/debs"
exec 9>"$CACHE/.lock"
command -v flock >/dev/null && flock 9

MIRROR=$(debian_mirror)
TRIM_VERSION=2   # bump when the trimming below changes
BASE_KEY=$(printf '%s\n' "$SUITE" "$PACKAGES" "$TRIM_VERSION" "$(uname -m)" | sha256sum | cut -c1-12)
BASE_TAR="$CACHE/base-$SUITE-$BASE_KEY.tar"
BASE_IMAGE="localhost/gangrun-base:$BASE_KEY"
TIMINGS=()

build_base_rootfs() {
  local root="$CACHE/rootfs.tmp"
  rm -rf "$root"
  debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE/debs" "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
  # What a container never needs: docs, man pages, locales, apt's lists and caches, logs.
  rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,linda}/* "$root"/var/cache/apt/* \
    "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/var/cache/debconf/*-old "$root"/tmp/*
  # The standard library's bytecode stays (compiled here when a package left some out): a container's
  # user cannot write /usr/lib/python3.11, and without it every Python process in a pod compiles what
  # it imports again (a worker's launcher and script: about 2 s each on a loaded 2-core machine).
  chroot "$root" /usr/bin/python3 -m compileall -q /usr/lib/python3.11 >/dev/null
  tar --numeric-owner -C "$root" -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$root"
}

commit_base_image() {
  local ctr
  ctr=$(buildah from scratch)
  buildah add --quiet "$ctr" "$BASE_TAR" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  buildah commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
}

build_pause() {
  local work="$CACHE/pause.tmp" ctr
  rm -rf "$work"; mkdir -p "$work"
  gcc -static -Os -s -o "$work/pause" hack/images/pause.c
  ctr=$(buildah from scratch)
  buildah copy --quiet "$ctr" "$work/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' "$ctr"
  buildah commit --quiet --rm "$ctr" "$PAUSE_IMAGE" >/dev/null
  rm -f "$OUT/pause.tar"
  buildah push --quiet "$PAUSE_IMAGE" "docker-archive:$OUT/pause.tar:$PAUSE_IMAGE"
  rm -rf "$work"
}

source_key() {
  # The project image's inputs: the Dockerfile, the package metadata and the source tree.
  { sha256sum Dockerfile pyproject.toml README.md constraints.txt; find src -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
      | sort -z | xargs -0 sha256sum; echo "$BASE_KEY"; } | sha256sum | cut -c1-16
}

bud() {  # bud <tag> <archive name> [buildah args...]: the Dockerfile on the base, exported to $OUT/<name>.tar
  local tag=$1 name=$2; shift 2
  rm -f "$OUT/$name.tar"
  # pip in the build trusts what the host trusts (a proxy's CA may be there), and uses the host's index.
  local ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt} args=()
  if [ -f "$ca" ]; then args+=(-v "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt); fi
  if [ -n "${PIP_INDEX_URL:-}" ]; then args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"); fi
  buildah bud --quiet --layers --network host --pull-never --build-arg "BASE=$BASE_IMAGE" "${args[@]}" "$@" \
    -t "$tag" -f Dockerfile . >/dev/null
  buildah push --quiet "$tag" "docker-archive:$OUT/$name.tar:$tag"
}

build_project_image() { bud "$IMAGE" gangrun; }
build_flyte_image() { bud "$FLYTE_IMAGE" gangrun-flyte --build-arg EXTRAS=kubernetes,s3,flyte; }

cached() {  # cached <tag> <archive name> <key>: whether that image is built from these inputs and exported
  [ "$(cat "$OUT/$2.key" 2>/dev/null)" = "$3" ] && [ -f "$OUT/$2.tar" ] && buildah inspect --type image "$1" >/dev/null 2>&1
}

timed() {  # timed <label> <function>
  local start=$SECONDS
  "$2"
  TIMINGS+=("$1: $((SECONDS - start)) s")
}

if [ -f "$BASE_TAR" ]; then TIMINGS+=("base rootfs: cached"); else timed "base rootfs (debootstrap)" build_base_rootfs; fi
if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then TIMINGS+=("base image: cached"); else timed "base image (buildah)" commit_base_image; fi
if [ -f "$OUT/pause.tar" ] && buildah inspect --type image "$PAUSE_IMAGE" >/dev/null 2>&1; then
  TIMINGS+=("pause image: cached")
else
  timed "pause image" build_pause
fi
KEY=$(source_key)
if cached "$IMAGE" gangrun "$KEY"; then
  TIMINGS+=("$IMAGE: cached")
else
  timed "$IMAGE (buildah bud)" build_project_image
  echo "$KEY" > "$OUT/gangrun.key"
fi
echo "$IMAGE" > "$OUT/gangrun.name"
echo "$PAUSE_IMAGE" > "$OUT/pause.name"
ARCHIVES=("$OUT/pause.tar" "$OUT/gangrun.tar")
if [ -n "$WITH_FLYTE" ]; then
  if cached "$FLYTE_IMAGE" gangrun-flyte "$KEY"; then
    TIMINGS+=("$FLYTE_IMAGE: cached")
  else
    timed "$FLYTE_IMAGE (buildah bud)" build_flyte_image
    echo "$KEY" > "$OUT/gangrun-flyte.key"
  fi
  echo "$FLYTE_IMAGE" > "$OUT/gangrun-flyte.name"
  ARCHIVES+=("$OUT/gangrun-flyte.tar")
fi

printf '  %s\n' "${TIMINGS[@]}"
for tar in "${ARCHIVES[@]:1}"; do
  echo "  $(cat "${tar%.tar}.name"): $(du -m "$tar" | cut -f1) MB as an archive"
done

if [ -n "$IMPORT_SOCKET" ]; then
  for tar in "${ARCHIVES[@]}"; do
    ctr --address "$IMPORT_SOCKET" -n k8s.io images import "$tar" >/dev/null
  done
fi
