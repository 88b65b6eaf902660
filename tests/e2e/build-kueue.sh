#!/usr/bin/env bash
# Builds Kueue's manager from its published Go module (no release
# downloads, no containers) into a cache outside the repository, keyed by
# version, with its CRDs (plain YAML from the module's
# config/components/crd/bases, installed as they are: no conversion
# webhook). Prints the kueue directory (bin/kueue, crds/*.yaml) on success.
#
#   KUEUE_VERSION      (default v0.17.0)
#   GPUGATE_E2E_CACHE  (default ~/.cache/gpugate-e2e)
#
# One change to upstream: with internalCertManagement off, cmd/kueue reads
# its metrics serving certificate from the fixed path
# /etc/kueue/metrics/certs/tls.{crt,key} and exits when it is missing
# (even with metrics.bindAddress "0"); internal cert management needs the
# Secret mounted by a kubelet. So cmd/kueue/main.go is copied into a
# wrapper module (same dependency versions: sigs.k8s.io/kueue is its only
# requirement) with that path read from $KUEUE_METRICS_CERT_DIR (default
# the upstream path).
set -euo pipefail

# The cache, Go's environment and the build lock (exit 3: no go).
source "$(dirname "${BASH_SOURCE[0]}")/build-cache.sh"

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION"

if [[ -f "$DIR/.complete" ]]; then
    echo "$DIR"
    exit 0
fi
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/crds" "$DIR/src"

kueue_dir="$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')"

# The module zip carries the generated CRDs.
cp "$kueue_dir"/config/components/crd/bases/*.yaml "$DIR/crds/"
chmod u+w "$DIR"/crds/*.yaml

# --- the manager: upstream cmd/kueue/main.go, metrics cert dir from env --
cd "$DIR/src"
cat > go.mod <<MOD
module gpugate.invalid/e2e/kueue

go 1.26
MOD
go get "sigs.k8s.io/kueue@$KUEUE_VERSION" >/dev/null 2>&1 || go get "sigs.k8s.io/kueue@$KUEUE_VERSION"
old='metricsCertPath := "/etc/kueue/metrics/certs"'
new='metricsCertPath := cmp.Or(os.Getenv("KUEUE_METRICS_CERT_DIR"), "/etc/kueue/metrics/certs")'
grep -qF "$old" "$kueue_dir/cmd/kueue/main.go" || {
    echo "cmd/kueue/main.go of $KUEUE_VERSION has no '$old'" >&2
    exit 1
}
sed -e "s|$old|$new|" -e 's|^import (|import (\n\t"cmp"|' \
    "$kueue_dir/cmd/kueue/main.go" > main.go
chmod u+w main.go
go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    -o "$DIR/bin/kueue.tmp" .
mv "$DIR/bin/kueue.tmp" "$DIR/bin/kueue"

touch "$DIR/.complete"
echo "$DIR"
