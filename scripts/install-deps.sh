#!/usr/bin/env bash
# Installs the Debian packages the project needs, and only those that are missing.
set -euo pipefail

packages=(
    libavahi-client-dev libgnutls28-dev libsqlite3-dev zlib1g-dev pkg-config
    avahi-daemon avahi-utils dbus gnutls-bin iproute2 iptables openssl procps
    python3  # the multi-host suite's rogue host (a TCP sink) and keyless flooder
    python3-venv  # make bench: the store's anchors from PyPI (Benchmarks/anchors.py)
)

missing=()
for package in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "Installing missing Debian packages: ${missing[*]}"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
