#!/usr/bin/env bash
# A local stand-in for the python:3.11-slim base image, for machines that reach no image registry but do
# reach a Debian mirror: Debian bookworm (minbase) with its python3 3.11, pip and venv, made with
# debootstrap and imported into the container engine under the same tag, so that Dockerfile.cpu builds
# unchanged. Debian's python is marked externally managed (PEP 668); the marker is removed so that pip
# installs system-wide as in the official image, and python / pip name python3 / pip3 there too. This
# machine's own CA certificates go in as well (pip behind a TLS-intercepting proxy needs them).
#
#   docker/local_base.sh [ENGINE] [TAG]        (ENGINE: podman or docker, default podman; TAG: python:3.11-slim)
#   MIRROR=http://deb.debian.org/debian        (the Debian mirror; default: the first of this machine's apt sources)
set -euo pipefail

engine="${1:-podman}"
tag="${2:-python:3.11-slim}"
mirror="${MIRROR:-$(grep -rhoE '^(deb|URIs:) +\[?[^ ]*' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
    | grep -oE 'https?://[^ ]*debian/?$' | head -n1 || true)}"
mirror="${mirror:-http://deb.debian.org/debian}"

command -v debootstrap >/dev/null || { echo "local_base: debootstrap is missing: apt-get install -y debootstrap" >&2; exit 2; }
rootfs="$(mktemp -d "${TMPDIR:-/var/tmp}/wde-base.XXXXXX")"
trap 'rm -rf "$rootfs"' EXIT

# 1. Debian bookworm with python3 (3.11), pip and venv, the CA certificates pip needs
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -n 20 "$rootfs.log" >&2; exit 1; }
rm -f "$rootfs.log"
# 2. as python:3.11-slim: pip installs system-wide, `python` and `pip` exist, no apt lists kept
rm -f "$rootfs"/usr/lib/python3.*/EXTERNALLY-MANAGED
ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$rootfs/usr/local/bin/pip"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
# 3. this machine's own CA certificates (an egress proxy that re-signs TLS), as a site's base image has them
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
fi
# 4. into the engine under the official tag
tar -C "$rootfs" -c . | "$engine" import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$tag" >/dev/null
echo "local_base: $tag = Debian bookworm from $mirror with python $(chroot "$rootfs" python3 -c 'import sys; print(sys.version.split()[0])')"
