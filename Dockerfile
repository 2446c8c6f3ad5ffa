# The chargerecovery image: one static binary (pure Go, no cgo), the CA
# bundle for TLS to AWS and the bank, nothing else — no shell, no package
# manager. Runs as a non-root user with a read-only root filesystem (give it
# a writable /tmp only for the embedded backend or the demo).
#
#   docker build -t chargerecovery .        (or: buildah build -t chargerecovery .)
#   docker run --rm --read-only --tmpfs /tmp chargerecovery demo
#
# The final stage is the same as deploy/image/Containerfile.prebuilt, which
# .ci/run builds from `make build`'s binary on a machine with no registry
# (scripts/image-test.sh checks the two stay the same).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /rootfs/chargerecovery ./cmd/chargerecovery \
 && mkdir -p /rootfs/etc/ssl/certs \
 && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ca-certificates.crt

# --- final stage (keep in step with deploy/image/Containerfile.prebuilt) ---
FROM scratch
COPY --from=build /rootfs/ /
# The ops server (/metrics, /healthz, /readyz) on every interface of the
# pod, so that probes and Prometheus can reach it; 127.0.0.1 outside images.
ENV IC_HTTP_ADDR=:9090 IC_LOG_FORMAT=json
EXPOSE 9090
USER 65532:65532
ENTRYPOINT ["/chargerecovery"]
CMD ["serve"]
