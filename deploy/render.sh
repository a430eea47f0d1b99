#!/bin/sh
# Print deploy/ as kustomize renders it, with the scheduler's and the node
# installer's images replaced: what `make deploy` applies.
#
#   deploy/render.sh [IMG [IPAM_IMG]]
#   deploy/render.sh registry.example:5000/ipscheduler:0.1.0 registry.example:5000/ipscheduler-ipam:0.1.0
#
# IMG and IPAM_IMG are image references: name:tag, name@sha256:digest, or a
# bare name (which keeps the tag of deploy/kustomization.yaml, the version).
# Omitted, they stay as deploy/kustomization.yaml sets them. deploy/ itself is
# never modified: the manifests are copied into a temporary folder, with an
# overlay kustomization.yaml next to them that sets `images:` (kustomize
# refuses absolute paths to a base). KUBECTL overrides the kubectl used.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
kubectl=${KUBECTL:-kubectl}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# image NAME REF: the kustomize `images:` entry that turns image NAME into REF.
image() {
    name=$1 ref=$2
    case $ref in
        *@*)
            printf '  - name: %s\n    newName: "%s"\n    digest: "%s"\n' "$name" "${ref%%@*}" "${ref#*@}" ;;
        *)
            # A ':' after the last '/' starts the tag (registry.example:5000/x has none).
            case ${ref##*/} in
                *:*) printf '  - name: %s\n    newName: "%s"\n    newTag: "%s"\n' "$name" "${ref%:*}" "${ref##*:}" ;;
                *) printf '  - name: %s\n    newName: "%s"\n' "$name" "$ref" ;;
            esac ;;
    esac
}

mkdir "$tmp/base"
cp "$here"/*.yaml "$tmp/base/"
{
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "  - base"
    if [ -n "${1:-}${2:-}" ]; then echo "images:"; fi
    if [ -n "${1:-}" ]; then image ipscheduler "$1"; fi
    if [ -n "${2:-}" ]; then image ipscheduler-ipam "$2"; fi
} > "$tmp/kustomization.yaml"
"$kubectl" kustomize "$tmp"
