#!/usr/bin/env bash
# The third-party programs the deployment tests run, built from their Go
# modules at pinned versions (the Go module proxy is all they need) into a
# cache that outlives the checkout:
#
#   deploy/tools.sh install      build what is missing (.ci/install-deps.sh runs it)
#   deploy/tools.sh path NAME    print the path of NAME's binary; exit 1 when not built
#
# helm          lints and renders the chart (deploy/helm/spanwatch)
# kubectl-validate
#               validates rendered objects against the Kubernetes API's
#               OpenAPI schemas it embeds (1.23 to 1.30), offline
#
# The cache is $SPANWATCH_TOOLS, else /var/cache/spanwatch-tools for root
# and ~/.cache/spanwatch-tools for other users. A cold build takes about 5
# minutes on 2 cores (mostly module downloads; both build at once); a warm
# one nothing.
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin

tools=(
	"helm helm.sh/helm/v4/cmd/helm@v4.3.2"
	"kubectl-validate sigs.k8s.io/kubectl-validate@v0.0.4"
)

if [[ $(id -u) -eq 0 ]]; then
	cache=${SPANWATCH_TOOLS:-/var/cache/spanwatch-tools}
else
	cache=${SPANWATCH_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/spanwatch-tools}
fi

# dir is where one tool at one version lives: a new version is a new
# directory, so a stale binary is never taken for the pinned one.
dir() { local pkg=${1#* }; echo "$cache/${pkg//[\/@]/_}"; }

case ${1:-} in
path)
	for t in "${tools[@]}"; do
		if [[ ${t%% *} == "${2:-}" ]]; then
			bin=$(dir "$t")/${t%% *}
			[[ -x $bin ]] || { echo "tools: $2 is not built: run deploy/tools.sh install" >&2; exit 1; }
			echo "$bin"
			exit 0
		fi
	done
	echo "tools: unknown tool ${2:-}" >&2
	exit 2
	;;
install)
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	pids=()
	for t in "${tools[@]}"; do
		name=${t%% *} pkg=${t#* } d=$(dir "$t")
		if [[ -x $d/$name ]]; then
			echo "tools: $name cached ($pkg)"
			continue
		fi
		echo "tools: building $pkg"
		(
			tmp=$(mktemp -d "$cache/.build.XXXXXX")
			trap 'rm -rf "$tmp"' EXIT
			# Outside any module: go install takes the tool's own go.mod.
			cd "$tmp"
			GOBIN=$tmp/bin GOFLAGS= go install "$pkg"
			rm -rf "$d"
			mkdir -p "$d"
			mv "$tmp/bin/$name" "$d/$name"
		) &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p"
	done
	;;
*)
	echo "usage: deploy/tools.sh install | path NAME" >&2
	exit 2
	;;
esac
