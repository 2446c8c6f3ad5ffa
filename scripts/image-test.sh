#!/usr/bin/env bash
# Builds the chargerecovery image with buildah (FROM scratch: no registry is
# needed) from `make build`'s static binary, and runs the demo in it the way
# a cluster runs it: non-root, read-only root filesystem, a tmpfs /tmp, no
# shell in the image. Also checks that the Dockerfile's final stage and
# deploy/image/Containerfile.prebuilt are the same.
#
# Needs buildah, podman and runc (Debian: apt-get install buildah podman runc).
# On machines whose cgroups crun cannot use (hybrid v1/v2), runc is used.
set -euo pipefail
cd "$(dirname "$0")/.."

final() { sed -n '/^# --- final stage/,$p' "$1" | grep -v '^# --- final stage' | grep -v '^COPY '; }
if ! diff <(final Dockerfile) <(final deploy/image/Containerfile.prebuilt); then
  echo "image-test: the Dockerfile's final stage and deploy/image/Containerfile.prebuilt differ"; exit 1
fi

work=$(mktemp -d)
store=$(mktemp -d)
conf="$work/containers.conf"
trap 'rm -rf "$work"; buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs rm --all >/dev/null 2>&1 || true; rm -rf "$store"' EXIT
# No default ulimits (an unprivileged CI container may not raise them) and
# cgroupfs (no systemd).
printf '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n' > "$conf"
export CONTAINERS_CONF="$conf"
storage=(--root "$store/root" --runroot "$store/run" --storage-driver vfs)

make build BIN="$work/rootfs/chargerecovery" >/dev/null
mkdir -p "$work/rootfs/etc/ssl/certs"
cp /etc/ssl/certs/ca-certificates.crt "$work/rootfs/etc/ssl/certs/"
cp deploy/image/Containerfile.prebuilt "$work/Containerfile"
buildah "${storage[@]}" build --quiet -t localhost/chargerecovery:test -f "$work/Containerfile" "$work" >/dev/null
echo "image-test: built localhost/chargerecovery:test ($(du -sh "$work/rootfs" | cut -f1) root filesystem)"

user=$(podman "${storage[@]}" image inspect --format '{{.Config.User}}' localhost/chargerecovery:test)
[ "$user" = "65532:65532" ] || { echo "image-test: the image runs as '$user', want 65532:65532"; exit 1; }

runtime=()
command -v runc >/dev/null && runtime=(--runtime runc)
run=(podman "${storage[@]}" "${runtime[@]}" run --rm --read-only --tmpfs /tmp --network host)
if "${run[@]}" --entrypoint /bin/sh localhost/chargerecovery:test -c true >/dev/null 2>&1; then
  echo "image-test: the image has a shell"; exit 1
fi
out=$("${run[@]}" localhost/chargerecovery:test demo 2>&1) || { echo "$out"; echo "image-test: the demo failed in the container"; exit 1; }
echo "$out" | tail -1
echo "$out" | grep -q '^OK: every charge was debited exactly once' || { echo "image-test: no OK from the demo"; exit 1; }
echo "image-test: OK (non-root, read-only root, no shell, demo passed)"
