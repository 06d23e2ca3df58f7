#!/usr/bin/env bash
# Builds the agent base image (see images/Dockerfile) without a registry: a minimal Debian
# bookworm tree from the apt mirror this host already uses (debootstrap --variant=minbase, with
# git, python3, python3-pip and ca-certificates), imported with `docker import`. Falls back to a static busybox
# tree when debootstrap cannot run. /tmp is mode 1777 (a tmpfs on /tmp takes the image's mode).
#
# Usage: images/build-offline.sh [TAG]      (default ralph-agent-base:latest; run as root)
#        BUSYBOX=1 images/build-offline.sh TAG   forces the busybox tree
# Skips the build when the tag exists already (FORCE=1 rebuilds). Nothing is cached outside
# the clone: the tree is built in a temporary directory and removed.
set -euo pipefail
tag=${1:-ralph-agent-base:latest}
if [ "${FORCE:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "build-offline: $tag exists; skipping (FORCE=1 rebuilds)"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "build-offline: needs root (debootstrap, chown)" >&2; exit 1; }

# The mirror: the first deb URI of the host's apt sources (deb822 or one-line format).
mirror=$(
    { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources || true
      grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list || true
    } | awk '$1 == "URIs:" {print $2} $1 == "deb" {print $2}' | grep -v security | head -n1 || true
)
mirror=${mirror:-http://deb.debian.org/debian}

tree=$(mktemp -d "${TMPDIR:-/tmp}/ralph-image-XXXXXX")
trap 'rm -rf "$tree"' EXIT

build_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 || {
        apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    }
    echo "build-offline: debootstrap bookworm from $mirror"
    debootstrap --variant=minbase --include=git,python3,python3-pip,ca-certificates \
        bookworm "$tree" "$mirror" >"$tree.log" 2>&1 || {
        tail -20 "$tree.log" >&2
        return 1
    }
    rm -f "$tree.log"
    # Keep the image small: no apt lists, caches, docs or man pages.
    rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin "$tree"/var/cache/apt/archives/*.deb \
        "$tree"/usr/share/doc/* "$tree"/usr/share/man/* "$tree"/usr/share/locale/*
    chroot "$tree" useradd --create-home --uid 1000 --shell /bin/sh agent
}

build_busybox() {
    local bb
    bb=$(command -v busybox || true)
    if [ -z "$bb" ]; then
        apt-get install -y -qq --no-install-recommends busybox-static >/dev/null
        bb=$(command -v busybox)
    fi
    echo "build-offline: static busybox tree from $bb (no git or python3 in this image)"
    rm -rf "${tree:?}"/*
    mkdir -p "$tree"/{bin,etc,home/agent,root,usr/bin,proc,sys,dev}
    cp "$bb" "$tree/bin/busybox"
    for cmd in $("$tree/bin/busybox" --list); do
        [ -e "$tree/bin/$cmd" ] || ln -s busybox "$tree/bin/$cmd"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n' >"$tree/etc/passwd"
    printf 'root:x:0:\nagent:x:1000:\n' >"$tree/etc/group"
}

if [ "${BUSYBOX:-0}" = 1 ]; then build_busybox; else build_debootstrap || build_busybox; fi
mkdir -p "$tree/tmp"
chmod 1777 "$tree/tmp"
tar --numeric-owner -C "$tree" -c . | docker import \
    --change 'CMD ["/bin/sh"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$tag" >/dev/null
echo "build-offline: built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
