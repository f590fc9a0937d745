#!/usr/bin/env bash
# Builds spanwatch's release artefacts from the local tree, without a
# container daemon and pulling nothing:
#
#   DIR/spanwatch-VERSION-linux-amd64    static binaries, stamped with the
#   DIR/spanwatch-VERSION-linux-arm64    version and revision (README)
#   DIR/SHA256SUMS
#   DIR/spanwatch-VERSION.oci/           the container image for both
#                                        platforms: an OCI image layout
#                                        (deploy/image, go-containerregistry)
#
#   deploy/release.sh [--version V] [--out DIR] [--push REF]
#
# --version defaults to the tag on HEAD, else "git describe --tags --always
# --dirty"; a release is tagged internal/buildinfo.Release. --out defaults
# to ./dist. --push also pushes the image index to REF (e.g.
# ghcr.io/spanwatch/spanwatch:v0.2.0) with docker's or podman's login.
#
# The image runs as it is with podman (podman run oci:DIR/spanwatch-V.oci:V)
# or is copied anywhere with skopeo (skopeo copy --all oci:DIR:V
# docker://REF). TestRelease and TestImageRuns (deploy/) check all of it,
# the latter by running the image's demo under runc.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

version=""
out=dist
push=""
while (($#)); do
	case $1 in
	--version) version=$2; shift ;;
	--out) out=$2; shift ;;
	--push) push=$2; shift ;;
	*) echo "usage: deploy/release.sh [--version V] [--out DIR] [--push REF]" >&2; exit 2 ;;
	esac
	shift
done
if [[ -z $version ]]; then
	version=$(git describe --tags --exact-match 2>/dev/null || git describe --tags --always --dirty 2>/dev/null || echo "(devel)")
fi
revision=$(git rev-parse HEAD 2>/dev/null || true)
# The commit's time, for reproducible image digests; now when there is no
# commit to ask.
created=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)

mkdir -p "$out"
pkg=github.com/spanwatch/spanwatch/internal/buildinfo
args=()
for arch in amd64 arm64; do
	bin=$out/spanwatch-$version-linux-$arch
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
		-ldflags "-s -w -X $pkg.version=$version -X $pkg.revision=$revision" \
		-o "$bin" ./cmd/spanwatch
	args+=(--binary "linux/$arch=$bin")
	# Run what this machine can run: natively, or under qemu-user.
	run=()
	case $(uname -m)/$arch in
	x86_64/amd64 | aarch64/arm64) run=("$bin") ;;
	x86_64/arm64) command -v qemu-aarch64 >/dev/null && run=(qemu-aarch64 "$bin") ;;
	aarch64/amd64) command -v qemu-x86_64 >/dev/null && run=(qemu-x86_64 "$bin") ;;
	esac
	if ((${#run[@]})); then
		got=$("${run[@]}" --version)
		case $got in
		"spanwatch $version "*"linux/$arch)") echo "release: $got" ;;
		*) echo "release: $bin says \"$got\", want version $version on linux/$arch" >&2; exit 1 ;;
		esac
	else
		echo "release: built $bin (not run: no qemu-user for $arch here)"
	fi
done
(cd "$out" && sha256sum "spanwatch-$version-linux-amd64" "spanwatch-$version-linux-arm64" > SHA256SUMS)
image=(go run ./deploy/image "${args[@]}" --version "$version" --revision "$revision" --created "$created" --out "$out/spanwatch-$version.oci")
if [[ -n $push ]]; then
	image+=(--push "$push")
fi
"${image[@]}"
