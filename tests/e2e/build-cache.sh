# Sourced by the build scripts of tests/e2e (build-control-plane.sh,
# build-kueue.sh): the cache they build into (CACHE_ROOT), Go set up to
# resolve modules there, the working directory there, and the cache's one
# build lock held. Exit status 3 means only "no go"; any other failure is 1.
CACHE_ROOT="${GPUGATE_E2E_CACHE:-$HOME/.cache/gpugate-e2e}"
command -v go >/dev/null || { echo "go is not installed" >&2; exit 3; }
trap 'exit 1' ERR
# No go.work from the caller's directories; modules are resolved here.
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOWORK=off
export GOCACHE="${GOCACHE:-$CACHE_ROOT/go-build}"
mkdir -p "$CACHE_ROOT"
cd "$CACHE_ROOT"
# One build at a time per cache (two test runs at once share it).
exec 9>"$CACHE_ROOT/.build.lock"
flock 9
