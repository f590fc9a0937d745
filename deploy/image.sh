#!/usr/bin/env bash
# Builds the spanwatch container image from the local tree, pulling
# nothing: a static binary (CGO_ENABLED=0) stamped with its version, the
# host's CA bundle, and the Dockerfile at the repository's root, FROM
# scratch.
#
#   deploy/image.sh [--smoke] [--version V] [--tag IMAGE] [--context DIR]
#
# --version defaults to "git describe --tags --always --dirty"; --tag to
# ghcr.io/spanwatch/spanwatch:VERSION (the name the DaemonSet runs).
# --context keeps the build context (binary, CA bundle, Dockerfile) in DIR.
# --smoke runs the built image ("spanwatch --version") and checks that it
# prints the version. Without a Docker daemon the binary is still built and
# checked, and the script says why the image was not.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

smoke=0
version=""
tag=""
ctx=""
while (($#)); do
	case $1 in
	--smoke) smoke=1 ;;
	--version) version=$2; shift ;;
	--tag) tag=$2; shift ;;
	--context) ctx=$2; shift ;;
	*) echo "usage: deploy/image.sh [--smoke] [--version V] [--tag IMAGE] [--context DIR]" >&2; exit 2 ;;
	esac
	shift
done
if [[ -z $version ]]; then
	version=$(git describe --tags --always --dirty 2>/dev/null || echo "(devel)")
fi
tag=${tag:-ghcr.io/spanwatch/spanwatch:$version}
revision=$(git rev-parse HEAD 2>/dev/null || true)

if [[ -z $ctx ]]; then
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
fi
mkdir -p "$ctx"
pkg=github.com/spanwatch/spanwatch/internal/buildinfo
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X $pkg.version=$version -X $pkg.revision=$revision" \
	-o "$ctx/spanwatch" ./cmd/spanwatch
cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
cp Dockerfile "$ctx/"

got=$("$ctx/spanwatch" --version)
case $got in
"spanwatch $version "*) ;;
*) echo "image: the binary says \"$got\", want version $version" >&2; exit 1 ;;
esac
echo "image: built $got"

if ! out=$(docker info --format '{{.ServerVersion}}' 2>&1); then
	echo "image: not built: no Docker daemon here ($(echo "$out" | tail -n 1))"
	exit 0
fi
docker build --quiet --tag "$tag" --file "$ctx/Dockerfile" "$ctx" >/dev/null
echo "image: built $tag (Docker $out)"
if ((smoke)); then
	got=$(docker run --rm "$tag" --version)
	case $got in
	"spanwatch $version "*) echo "image: $tag runs: $got" ;;
	*) echo "image: $tag says \"$got\", want version $version" >&2; exit 1 ;;
	esac
fi
