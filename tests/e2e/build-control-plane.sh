#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-scheduler from their published Go
# modules (no release downloads, no containers) into a cache outside the
# repository, keyed by version, and kustomize, helm and cert-manager's CRDs
# (in bin/../tools). Prints the bin directory on success.
#
#   K8S_VERSION        (default v1.36.3)
#   ETCD_VERSION       (default v3.6.16)
#   KUSTOMIZE_VERSION  (default v5.8.0: v5.8.1+ need Go 1.27)
#   CERT_MANAGER_VERSION (default v1.21.2: only its CRDs, for the dry run
#                        of deploy/cert-manager)
#   HELM_VERSION       (default v3.22.0: helm lint/template of deploy/helm)
#   GPUGATE_E2E_CACHE (default ~/.cache/gpugate-e2e)
#
# See docs/e2e.md and ../shared/real-control-plane.md (B1-B4) for why it is
# done this way: k8s.io/kubernetes needs a replace line per staging module,
# generated here from its own go.mod as the module proxy serves it.
set -euo pipefail

# The cache, Go's environment and the build lock (exit 3: no go).
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KUSTOMIZE_VERSION="${KUSTOMIZE_VERSION:-v5.8.0}"
CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.21.2}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
DIR="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
BIN="$DIR/bin"

TOOLS="$CACHE_ROOT/tools-kustomize-$KUSTOMIZE_VERSION-cert-manager-$CERT_MANAGER_VERSION-helm-$HELM_VERSION"

# --- kustomize, helm and cert-manager's CRDs (their own cache key) --------
if [[ ! -f "$TOOLS/.complete" ]]; then
    rm -rf "$TOOLS"
    mkdir -p "$TOOLS/crds"
    # kustomize's go.mod has no replace lines, so `go install` works.
    GOBIN="$TOOLS" go install -trimpath -ldflags "-s -w" \
        "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
    # helm's go.mod has no replace lines either. Built without release
    # ldflags, its default --kube-version is v1.20.0; tests pass their own.
    GOBIN="$TOOLS" go install -trimpath -ldflags "-s -w" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    # The module zip carries the generated CRDs, plain YAML.
    cm_dir="$(go mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" \
        | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"
    cp "$cm_dir"/deploy/crds/cert-manager.io_*.yaml "$TOOLS/crds/"
    chmod u+w "$TOOLS"/crds/*.yaml
    touch "$TOOLS/.complete"
fi
mkdir -p "$DIR"
ln -sfn "$TOOLS" "$DIR/tools"

K8S_CMDS=(kube-apiserver kube-scheduler kube-controller-manager)
missing=()
for cmd in "${K8S_CMDS[@]}"; do
    [[ -x "$BIN/$cmd" ]] || missing+=("$cmd")
done
if [[ -x "$BIN/etcd" && ${#missing[@]} -eq 0 ]]; then
    echo "$BIN"
    exit 0
fi
mkdir -p "$BIN" "$DIR/k8s" "$DIR/etcd"

# --- kube-apiserver, kube-scheduler, kube-controller-manager (only the
# replicaset and deployment controllers run, in the defragmentation
# scenario) --------------------------------------------------------------
if [[ ${#missing[@]} -gt 0 ]]; then
cd "$DIR/k8s"
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging_version="v0.${K8S_VERSION#v1.}"
cat > go.mod <<MOD
module gpugate.invalid/e2e/k8s

go 1.26
MOD
# k/k's own go.mod, verbatim from the module proxy: its replace block names
# every staging module (k8s.io/X => ./staging/src/k8s.io/X).
gomod_file="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
for module in $(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' "$gomod_file"); do
    go mod edit -replace="$module=$module@$staging_version"
done
go get "k8s.io/kubernetes@$K8S_VERSION" >/dev/null 2>&1 || go get "k8s.io/kubernetes@$K8S_VERSION"
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
for cmd in "${missing[@]}"; do
    go build -trimpath -ldflags "$ldflags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
done
fi

# --- etcd (its own module: MVS must not unify its client with k8s's) ----
if [[ ! -x "$BIN/etcd" ]]; then
cd "$DIR/etcd"
cat > go.mod <<MOD
module gpugate.invalid/e2e/etcd

go 1.26
MOD
go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$BIN/etcd.tmp" "$BIN/etcd"
fi

echo "$BIN"
