# The spanwatch agent image that deploy/kubernetes/spanwatch.yaml runs: one
# static binary on an empty base. Nothing is pulled: the binary and the CA
# bundle (for HTTPS webhooks) come from the build context, which
# deploy/image.sh prepares from the local tree:
#
#   deploy/image.sh                      # builds ghcr.io/spanwatch/spanwatch:<version>
#   deploy/image.sh --smoke              # and runs it: spanwatch --version
#
# By hand: CGO_ENABLED=0 go build -trimpath -o CONTEXT/spanwatch ./cmd/spanwatch,
# copy /etc/ssl/certs/ca-certificates.crt to CONTEXT, then
# docker build -f Dockerfile CONTEXT.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY spanwatch /usr/bin/spanwatch
# The agent needs root's uid with CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE
# (the DaemonSet grants exactly those); /tmp and /var/lib/spanwatch are
# volumes there.
USER 0:0
ENTRYPOINT ["/usr/bin/spanwatch"]
CMD ["run", "--config=/etc/spanwatch/rules.yaml"]
