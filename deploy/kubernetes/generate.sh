#!/usr/bin/env bash
# Renders spanwatch.yaml, the self-contained manifest, from the Helm chart
# (deploy/helm/spanwatch) with its default values, standalone: the
# Namespace included, Helm's own labels left out. Never edit spanwatch.yaml
# by hand: change the chart and run this. TestManifestIsChartRendering
# fails when the two differ.
#
#   deploy/kubernetes/generate.sh            write spanwatch.yaml
#   deploy/kubernetes/generate.sh --stdout   print it
#
# helm comes from deploy/tools.sh (deploy/tools.sh install builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
helm=$(deploy/tools.sh path helm)
render() {
	cat <<'HEADER'
# spanwatch on Kubernetes: one agent per node (a DaemonSet), rules from a
# ConfigMap, alerts to an in-cluster Alertmanager, metrics on port 9464.
# Apply with: kubectl apply -f deploy/kubernetes/spanwatch.yaml
# Generated from the Helm chart deploy/helm/spanwatch by
# deploy/kubernetes/generate.sh: do not edit. deploy/README.md explains
# every privilege below; deploy_test.go checks them.
HEADER
	# helm says on stderr that the chart's files/ are links to
	# deploy/prometheus and deploy/grafana; anything else is an error.
	"$helm" template spanwatch deploy/helm/spanwatch --namespace spanwatch \
		--set standalone=true --set namespace.create=true 2> >(grep -v 'found symbolic link in path' >&2)
}
case ${1:-} in
--stdout) render ;;
"") out=$(render) && printf '%s\n' "$out" > deploy/kubernetes/spanwatch.yaml ;;
*) echo "usage: deploy/kubernetes/generate.sh [--stdout]" >&2; exit 2 ;;
esac
