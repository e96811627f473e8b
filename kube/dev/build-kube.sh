#!/usr/bin/env bash
# Builds kube-apiserver and kube-scheduler v1.20.2 into OUT_DIR, offline, from Debian bookworm's
# source package `kubernetes` (1.20.5+really1.20.2): no registry here ships Kubernetes server
# binaries, and this source package carries the whole tree with its vendor/ directory.
#
#   kube/dev/build-kube.sh OUT_DIR
#
# About 5 minutes on 2 cores, 1.3 GB of RAM and 2 GB of disk while building; the build tree is
# removed afterwards.  Needs root for apt-get (the Go toolchain and two Go libraries, below).
# kube/dev/binaries.py runs it when the binaries are missing from the cache.
set -euo pipefail

out=${1:?usage: build-kube.sh OUT_DIR}
source_version=1.20.5+really1.20.2-1.1+deb12u1
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d -t tephra-kube-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Kubernetes 1.20 vendors reflect2 1.0.1, which Go >= 1.18 miscompiles into a SIGSEGV
# (mapiterinit, in json-iterator's sorted map encoder) the first time the apiserver encodes a
# custom resource.  Debian's reflect2 1.0.2 and json-iterator 1.1.12 replace the vendored copies.
packages=(golang-go make rsync dpkg-dev golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "build-kube.sh: needs ${packages[*]}; run as root or apt-get install them first" >&2
        exit 2
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

# Source indexes in a private apt state, derived from the machine's own sources (deb822 files
# and the one-line list), so /etc/apt stays as it is.
apt_dir=$work/apt
mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
: > "$apt_dir/sources.list"
for sources in /etc/apt/sources.list.d/*.sources; do
    [[ -f $sources ]] && sed 's/^Types:.*/Types: deb-src/' "$sources" > "$apt_dir/parts/$(basename "$sources")"
done
if [[ -f /etc/apt/sources.list ]]; then
    sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list > "$apt_dir/sources.list"
fi
apt_options=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
             -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
             -o APT::Sandbox::User=root)  # _apt cannot read a mktemp directory
apt-get "${apt_options[@]}" update -qq
cd "$work"
apt-get "${apt_options[@]}" source --download-only "kubernetes=$source_version" >/dev/null 2>&1
dpkg-source -x "kubernetes_${source_version}.dsc" tree >/dev/null 2>&1
cd tree
for module in github.com/modern-go/reflect2 github.com/json-iterator/go; do
    rm -rf "vendor/$module"
    cp -r "/usr/share/gocode/src/$module" "vendor/$module"
done

# GOPATH mode, as Debian's own rules build it; `make` generates the OpenAPI code a plain
# `go build` lacks.
mkdir -p .go/src/k8s.io
ln -s ../../.. .go/src/k8s.io/kubernetes
mkdir -p "$work/home"
export GOPATH=$PWD/.go GOPROXY=off GOFLAGS= CGO_ENABLED=0 HOME=$work/home
export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
make WHAT="cmd/kube-apiserver cmd/kube-scheduler" >/dev/null
# Installed side by side under temporary names, then renamed: a reader never sees half a binary.
for binary in kube-apiserver kube-scheduler; do
    install -m 755 "_output/bin/$binary" "$out/.$binary.partial"
    mv "$out/.$binary.partial" "$out/$binary"
done
"$out/kube-apiserver" --version
