#!/usr/bin/env bash
# Installs what building and testing spanwatch needs on a Debian machine:
# clang and libbpf headers (go generate ./bpf/...), the USDT header and
# bpftrace (USDT tests and benchmarks), PostgreSQL 15 and CPython 3.11 (USDT
# tests against programs we did not write), qemu, busybox and the kernel source
# (the user_events VM tests), qemu-system-arm and the arm64 cross compiler
# and C library (the kernel matrix's arm64 lanes and their C programs), Alertmanager (delivery tests), Prometheus and
# promtool (exporter and shipped-rules tests), util-linux and libcap tools
# (capability tests), zsh (the completion script's test), Chromium (the
# flame graph seen in a browser), runc (the container image run as the
# DaemonSet runs it), qemu-user (the arm64 release binary run on an amd64
# host), and the runtimes the SDKs of sdk/ are tested with (Debian's
# CPython 3.11 with its headers, setuptools and pip; OpenJDK 17; Node.js
# with npm and its headers); then the Go programs the deployment tests run
# (helm, kubectl-validate: deploy/tools.sh). Idempotent: installs only
# what is missing, and runs apt-get update at most once.
set -euo pipefail

pkgs=(
	clang llvm libbpf-dev bpftool bpftrace systemtap-sdt-dev
	postgresql-15 postgresql-client-15 python3.11
	qemu-system-x86 busybox-static cpio
	qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross
	linux-source-6.12 build-essential flex bison bc libelf-dev libssl-dev dwarves
	prometheus-alertmanager prometheus libcap2-bin util-linux systemd zsh
	chromium runc qemu-user
	python3.11-dev python3-setuptools python3-pip openjdk-17-jdk-headless
	ruby php8.2-cli
)
# Node.js: Debian's nodejs, npm and libnode-dev (the headers the addon is
# built against), unless a Node.js is installed already: NodeSource's
# nodejs package carries npm and the headers itself, and conflicts with
# Debian's npm.
if ! command -v node >/dev/null; then
	pkgs+=(nodejs npm libnode-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing packages ${missing[*]}; run as root to install them" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if ! command -v go >/dev/null; then
	echo "install-deps: Go is not on PATH (expected /usr/local/go/bin/go)" >&2
	exit 1
fi
# helm and kubectl-validate, built from their Go modules into a cache
# (about 5 minutes the first time, nothing after).
"$(dirname "$0")/../deploy/tools.sh" install
