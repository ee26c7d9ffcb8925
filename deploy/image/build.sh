#!/usr/bin/env bash
# make image: the daemon image without a Docker daemon (buildah), on a Debian base made from Debian packages
# (mmdebstrap), with kubectl/helm/sops from the local control plane's Go build. Prints the image's ID and
# digest and writes its SBOM to .cache/image/sbom/. Subcommands (default: all):
#   base      the base image localhost/gitops-sync-base:bookworm (skipped when present; IMAGE_BASE_REBUILD=1)
#   context   stage the build context in .cache/image/context (also what `docker build` elsewhere uses)
#   build     buildah bud of deploy/Containerfile on that context and base, then normalised into one layer
#             with every time SOURCE_DATE_EPOCH's: two builds of one commit give the same image ID and digest
#   all       the three, then the digest and the SBOM
#   report    the digest and the SBOM of the image built last
# Needs root (mmdebstrap --mode=root, buildah's storage), buildah, podman and mmdebstrap (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${IMAGE_OUT:-.cache/image}
VERSION=$(python3 -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open("gitops_sync/__init__.py").read())[1])')
IMAGE=${IMAGE:-localhost/gitops-sync:$VERSION}
BASE_IMAGE=${IMAGE_BASE:-localhost/gitops-sync-base:bookworm}
# Debian's packages in the base; the Containerfile installs the same list on the stock Debian image.
PIP=${PIP:-.venv/bin/pip}
BASE_PACKAGES=python3,python3-venv,git,openssh-client,ca-certificates
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then COMMIT="$COMMIT-dirty"; fi
# Layer and file times from the commit: two builds of one commit give the same layers.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

log() { printf '==> %s\n' "$*" >&2; }

base() {
  if [ -z "${IMAGE_BASE_REBUILD:-}" ] && podman image exists "$BASE_IMAGE"; then
    log "base $BASE_IMAGE present (IMAGE_BASE_REBUILD=1 rebuilds it)"
    return
  fi
  mkdir -p "$OUT"
  log "base: mmdebstrap bookworm ($BASE_PACKAGES) from this machine's Debian sources"
  # The host's apt sources on stdin: the same mirror apt-get uses here, named nowhere in this repository.
  local sources=() f
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do [ -f "$f" ] && sources+=("$f"); done
  awk '/^Types:|^URIs:|^Suites:|^Components:|^Signed-By:|^$|^deb /' "${sources[@]}" |
    mmdebstrap --variant=minbase --mode=root --format=tar --include="$BASE_PACKAGES" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --aptopt='Acquire::Retries "3"' bookworm "$OUT/base.tar" -
  podman import --change 'CMD ["/bin/bash"]' "$OUT/base.tar" "$BASE_IMAGE" >/dev/null
  rm -f "$OUT/base.tar"
}

tools_dir() {
  # The local control plane's build with sops (a no-op when current); its last line is the bin dir. sops is
  # built here, not picked up when present: two builds of one commit must copy in the same tools.
  python3 deploy/local-cluster/cluster.py build --with sops | tail -n 1
}

context() {
  local ctx="$OUT/context" bin
  bin=$(tools_dir)
  log "context: $ctx (tools from $bin)"
  rm -rf "$ctx" && mkdir -p "$ctx/tools"
  # What git tracks (and the work tree's changes to it) of what the image needs; nothing ignored.
  git ls-files -z --cached --others --exclude-standard -- pyproject.toml setup.py README.md requirements gitops_sync |
    xargs -0 -I{} sh -c '[ -e "{}" ] && echo "{}"' | tar -cf - -T - | tar -xf - -C "$ctx"
  # The locked wheels for Linux/CPython 3.11 (what Debian bookworm's python3 is), hashes checked by pip here
  # and again in the build.
  # Every manylinux tag glibc 2.36 (bookworm's) runs: pip does not widen an explicit --platform itself.
  local lock platforms=(--platform manylinux2014_x86_64) g
  for g in $(seq 17 36); do platforms+=(--platform "manylinux_2_${g}_x86_64"); done
  for lock in build runtime; do
    "$PIP" download --quiet --no-deps --require-hashes --only-binary=:all: --python-version 3.11 \
      --implementation cp "${platforms[@]}" -r "requirements/$lock.lock" -d "$ctx/wheels" >&2
  done
  local t
  for t in kubectl helm sops; do
    if [ -x "$bin/$t" ]; then install -m 0755 "$bin/$t" "$ctx/tools/$t"; fi
  done
  [ -x "$ctx/tools/kubectl" ] && [ -x "$ctx/tools/helm" ] && [ -x "$ctx/tools/sops" ] ||
    { echo "error: kubectl/helm/sops missing in $bin" >&2; exit 1; }
  echo "$ctx"
}

build() {
  local ctx="$OUT/context" base_id
  base_id=$(podman image inspect --format '{{.Id}}' "$BASE_IMAGE")
  log "build: $IMAGE on $BASE_IMAGE (sha256:$base_id), commit $COMMIT"
  # --isolation chroot: RUN steps need no OCI runtime (crun cannot run on this machine's hybrid cgroups);
  # the network of RUN is the host's (pip reaches the package index as pip does here).
  # Every step runs again: buildah's layer cache ignores --timestamp, so a cached step would carry the times
  # of the commit that first built it (normalise sets every file's time again, but IMAGE_CACHE=1 is for
  # iterating: quicker, reuses layers, not what the reproducibility test builds).
  local cache=(--no-cache)
  [ -n "${IMAGE_CACHE:-}" ] && cache=(--layers)
  buildah bud --isolation chroot --network host "${cache[@]}" --timestamp "$SOURCE_DATE_EPOCH" \
    --build-arg BASE="sha256:$base_id" --build-arg GITOPS_SYNC_COMMIT="$COMMIT" \
    --build-arg GITOPS_SYNC_VERSION="$VERSION" \
    --iidfile "$OUT/built.iid" -f deploy/Containerfile "$ctx" >&2
  normalise "$(cat "$OUT/built.iid")"
}

normalise() {
  # The image ID of a plain `buildah bud` depends on the base's image ID (its history carries the base's
  # import time, which `podman import` stamps on the base's config, and intermediate IDs): a rebuilt base with
  # the same layer (measured: mmdebstrap gives the same layer twice) gives another config, so another ID. Two
  # no-cache builds on one base gave one ID here (measured), so the real RUN time on a layer's root that
  # buildah 1.28 was said to record did not show (the root of a `buildah mount` is the working container's).
  # The image is therefore one layer of the built tree with every path's time set to SOURCE_DATE_EPOCH (in
  # place, links not followed), committed by `commit --squash --timestamp`: created is the commit's time;
  # ENTRYPOINT, CMD, USER, ENV, EXPOSE and the labels are kept. --omit-history: the only history entry of a
  # squashed image is "FROM <name of the unsquashed image>", a name, not content.
  local built=$1 ctr mnt
  ctr=$(buildah from --pull-never "$built")
  mnt=$(buildah mount "$ctr")
  find "$mnt" -xdev -exec touch -h -d "@$SOURCE_DATE_EPOCH" -- {} +
  buildah umount "$ctr" >/dev/null
  buildah commit --quiet --squash --omit-history --timestamp "$SOURCE_DATE_EPOCH" --rm "$ctr" "$IMAGE" >&2
  buildah rmi "$built" >/dev/null 2>&1 || true
}

report() {
  local id digest
  id=$(podman image inspect --format '{{.Id}}' "$IMAGE")
  digest=$(podman image inspect --format '{{.Digest}}' "$IMAGE")
  mkdir -p "$OUT/sbom"
  # The SBOM the build wrote into the image (pip inspect, dpkg-query), copied out, plus the tools' versions.
  local ctr
  ctr=$(buildah from --pull-never "$IMAGE")
  trap 'buildah rm "$ctr" >/dev/null' RETURN
  local mnt
  mnt=$(buildah mount "$ctr")
  cp "$mnt/usr/share/gitops-sync/sbom/"* "$OUT/sbom/"
  {
    for t in kubectl helm sops; do
      [ -x "$mnt/usr/local/bin/$t" ] && printf '%s\t%s\n' "$t" "$(sha256sum "$mnt/usr/local/bin/$t" | cut -d' ' -f1)"
    done
  } > "$OUT/sbom/tools.tsv"
  buildah umount "$ctr" >/dev/null
  printf '%s\n' "$IMAGE" > "$OUT/image.txt"
  printf 'image  %s\nid     sha256:%s\ndigest %s\nsbom   %s/sbom/ (python-packages.json: pip inspect; debian-packages.tsv; tools.tsv)\n' \
    "$IMAGE" "$id" "$digest" "$OUT"
}

case "${1:-all}" in
  base) base ;;
  context) context >/dev/null ;;
  build) build ;;
  all) base; context >/dev/null; build; report ;;
  report) report ;;
  *) echo "usage: $0 [base|context|build|all|report]" >&2; exit 2 ;;
esac
