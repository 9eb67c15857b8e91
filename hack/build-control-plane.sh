#!/usr/bin/env bash
# Build the binaries of a real Kubernetes control plane for gangrun's end-to-end tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, the JobSet controller
# and the Kueue manager; and for the real node: the kubelet, kube-proxy, kubectl (same Go build
# and version as the control plane) and CoreDNS. Everything comes from Go modules (no container engine, no release
# downloads); the binaries go to a cache directory OUTSIDE the clone, keyed by the versions,
# so a second call (or a CI run on the same machine) does nothing.
#
# Usage:
#   hack/build-control-plane.sh              build what is missing, print per-component timing
#   hack/build-control-plane.sh --print-dir  print the cache directory for these versions and exit
#   hack/build-control-plane.sh --check      exit 0 iff the cache is complete (builds nothing)
#
# Environment (all optional):
#   GANGRUN_CONTROL_PLANE_CACHE  cache root (default: $HOME/.cache/gangrun/control-plane)
#   GANGRUN_K8S_VERSION, GANGRUN_ETCD_VERSION, GANGRUN_KWOK_VERSION,
#   GANGRUN_JOBSET_VERSION, GANGRUN_KUEUE_VERSION, GANGRUN_COREDNS_VERSION   override the pinned versions
#
# Layout of <cache root>/<versions key>/:
#   bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl,
#        kwok,jobset,kueue,coredns}
#   versions.env   the versions, as KEY=value lines
#   moddirs.env    module-cache directories of kwok, JobSet and Kueue (CRDs, webhooks and
#                  stages are read from there at test time; nothing is copied into the repo)
#   complete       written last; its presence means the cache is usable
#   src/           the wrapper modules used to build kube-* and etcd
#   build.log      the output of the last build
set -euo pipefail

K8S_VERSION=${GANGRUN_K8S_VERSION:-1.36.3}
K8S_VERSION=${K8S_VERSION#v}   # without the leading v from here on
ETCD_VERSION=${GANGRUN_ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${GANGRUN_KWOK_VERSION:-v0.8.0}
JOBSET_VERSION=${GANGRUN_JOBSET_VERSION:-v0.12.0}
KUEUE_VERSION=${GANGRUN_KUEUE_VERSION:-v0.19.2}
COREDNS_VERSION=${GANGRUN_COREDNS_VERSION:-v1.14.7}

: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
CACHE_ROOT=${GANGRUN_CONTROL_PLANE_CACHE:-$HOME/.cache/gangrun/control-plane}
KEY="k8s${K8S_VERSION#v}-etcd${ETCD_VERSION#v}-kwok${KWOK_VERSION#v}-jobset${JOBSET_VERSION#v}-kueue${KUEUE_VERSION#v}-coredns${COREDNS_VERSION#v}"
ROOT="$CACHE_ROOT/$KEY"
BIN="$ROOT/bin"
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
BINARIES=(etcd "${KUBE_BINARIES[@]}" kwok jobset kueue coredns)

case "${1:-}" in
  --print-dir) echo "$ROOT"; exit 0 ;;
  --check) [ -f "$ROOT/complete" ] && exit 0 || exit 1 ;;
  "") ;;
  *) echo "usage: $0 [--print-dir|--check]" >&2; exit 2 ;;
esac

if [ -f "$ROOT/complete" ]; then
  echo "control plane cache complete: $ROOT (nothing to do)"
  exit 0
fi

command -v go >/dev/null || { echo "error: 'go' not found on PATH; Go >= 1.26 is needed" >&2; exit 1; }
mkdir -p "$BIN" "$ROOT/src/k8s" "$ROOT/src/etcd"

# One build at a time per cache directory (CI and a developer may call this concurrently).
exec 9>"$ROOT/.lock"
if command -v flock >/dev/null; then flock 9; fi
if [ -f "$ROOT/complete" ]; then echo "control plane cache complete: $ROOT (built concurrently)"; exit 0; fi
rm -rf "$ROOT"/.out.* "$BIN"/*.tmp   # debris of an interrupted build

export CGO_ENABLED=0          # upstream builds these server binaries statically
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
export NO_PROXY="${NO_PROXY:-127.0.0.1,localhost}"

TIMINGS=()
timed() {  # timed <name> <function>: run unless bin/<name> exists, record seconds
  local name=$1; shift
  if [ -x "$BIN/$name" ]; then
    echo "== $name: already built"; TIMINGS+=("$name: cached"); return 0
  fi
  local start=$SECONDS
  echo "== $name: building"
  "$@"
  local took=$((SECONDS - start))
  echo "== $name: built in ${took}s"
  TIMINGS+=("$name: ${took}s")
}

gomod_field() {  # gomod_field <module@version> <Field>: a field of `go mod download -json`
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"
}

build_kube() {  # every k8s.io/kubernetes binary in one go build (they share most packages)
  cd "$ROOT/src/k8s"
  rm -f go.mod go.sum
  go mod init local/k8sbins >/dev/null 2>&1
  local kmod minor ldf gd m
  kmod=$(gomod_field "k8s.io/kubernetes@v${K8S_VERSION#v}" GoMod)
  # Every staging module of k8s.io/kubernetes is required at v0.0.0 and replaced by ./staging
  # in its go.mod; a consumer must replace each one by its published v0.X.Y release.
  for m in $( { sed -nE 's#^[[:space:]]*(k8s\.io/[a-z0-9-]+) => \./staging/.*#\1#p' "$kmod"
                sed -nE 's#^[[:space:]]*(k8s\.io/[a-z0-9-]+) v0\.0\.0([[:space:]]*//.*)?$#\1#p' "$kmod"; } | sort -u ); do
    go mod edit -replace="$m=$m@v0.${K8S_VERSION#1.}"   # 1.36.3 -> v0.36.3
  done
  gd=$(sed -nE 's#^godebug (default=go[0-9.]+)$#\1#p' "$kmod" || true)
  if [ -n "$gd" ]; then go mod edit -godebug="$gd"; fi
  local pkgs=()
  for m in "${KUBE_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$m"); done
  go get -tool "${pkgs[@]/%/@v${K8S_VERSION#v}}"
  minor=$(echo "${K8S_VERSION#v}" | cut -d. -f2)
  # The version stamp is required: Kueue parses the server's gitVersion as semver at start-up.
  ldf="-s -w"
  for m in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf+=" -X $m.gitVersion=v${K8S_VERSION#v} -X $m.gitMajor=1 -X $m.gitMinor=$minor"
    ldf+=" -X $m.gitTreeState=clean -X $m.buildDate=1970-01-01T00:00:00Z"
  done
  local out; out=$(mktemp -d "$ROOT/.out.XXXXXX")
  go build -trimpath -tags selinux,notest -ldflags "$ldf" -o "$out/" "${pkgs[@]}"
  for m in "${KUBE_BINARIES[@]:1}"; do mv "$out/$m" "$BIN/"; done
  mv "$out"/kube-apiserver "$BIN/"   # last: its presence marks them all as built
  rmdir "$out"
}

build_etcd() {  # server/go.mod has replace directives, so build it from a wrapper module
  cd "$ROOT/src/etcd"
  rm -f go.mod go.sum
  go mod init local/etcdbin >/dev/null 2>&1
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

build_wrapped() {  # build_wrapped <binary> <module> <version> <main package> [extra ldflags]
  # A wrapper module (require <module>, nothing else) rather than `go install pkg@version`:
  # go install also reads the module's version list to look for a deprecation notice, and
  # a proxy that refuses to list a module (403) then fails the install even though the
  # version itself is served. The build list is the module's own (MVS over its go.mod).
  local name=$1 version=$3 pkg=$4 extra=${5:-}
  mkdir -p "$ROOT/src/$name"
  cd "$ROOT/src/$name"
  rm -f go.mod go.sum
  go mod init "local/${name}bin" >/dev/null 2>&1
  go get -tool "$pkg@$version"
  go build -trimpath -ldflags "-s -w $extra" -o "$BIN/$name.tmp" "$pkg"
  mv "$BIN/$name.tmp" "$BIN/$name"
}

build_kwok()   { build_wrapped kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok; }
build_jobset() { build_wrapped jobset sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset \
                   "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"; }
build_coredns() { build_wrapped coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns; }
build_kueue()  { build_wrapped kueue sigs.k8s.io/kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue \
                   "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"; }

{
  echo "building control plane into $ROOT ($(go version))"
  TOTAL_START=$SECONDS
  # kube-apiserver marks all three kube binaries (see build_kube).
  for m in "${KUBE_BINARIES[@]:1}"; do [ -x "$BIN/$m" ] || rm -f "$BIN/kube-apiserver"; done
  timed etcd build_etcd
  timed kwok build_kwok
  timed jobset build_jobset
  timed kueue build_kueue
  timed coredns build_coredns
  timed kube-apiserver build_kube
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN/$b" ] || { echo "error: $BIN/$b missing after build" >&2; exit 1; }
  done
  cat > "$ROOT/versions.env" <<EOF
K8S_VERSION=v${K8S_VERSION#v}
ETCD_VERSION=$ETCD_VERSION
KWOK_VERSION=$KWOK_VERSION
JOBSET_VERSION=$JOBSET_VERSION
KUEUE_VERSION=$KUEUE_VERSION
COREDNS_VERSION=$COREDNS_VERSION
EOF
  {
    echo "KWOK_DIR=$(gomod_field "sigs.k8s.io/kwok@$KWOK_VERSION" Dir)"
    echo "JOBSET_DIR=$(gomod_field "sigs.k8s.io/jobset@$JOBSET_VERSION" Dir)"
    echo "KUEUE_DIR=$(gomod_field "sigs.k8s.io/kueue@$KUEUE_VERSION" Dir)"
  } > "$ROOT/moddirs.env"
  echo "== timing per component (kube-apiserver = every k8s.io/kubernetes binary):"
  printf '   %s\n' "${TIMINGS[@]}"
  echo "== total: $((SECONDS - TOTAL_START))s"
  touch "$ROOT/complete"
  echo "control plane cache complete: $ROOT"
} 2>&1 | tee "$ROOT/build.log"
exit "${PIPESTATUS[0]}"
