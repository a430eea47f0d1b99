#!/bin/sh
# Installs ipscheduler-ipam on a node and keeps its kubeconfig current, as the
# Multus and whereabouts installers do: the DaemonSet in deploy/ runs this with
# the host's CNI directories mounted.
#
#   1. copies the plugin binary into the host's CNI bin directory (atomically:
#      a temporary file in the same directory, then rename), mode 0755;
#   2. writes <net.d>/ipscheduler-ipam.kubeconfig for the pod's own
#      ServiceAccount (server https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
#      CA and token embedded), mode 0600, atomically;
#   3. unless --once, checks every REFRESH_SECONDS whether the projected token
#      or the CA changed (tokens rotate) and rewrites the kubeconfig.
#
# Environment (defaults in brackets):
#   SA_DIR            [/var/run/secrets/kubernetes.io/serviceaccount] token, ca.crt
#   SOURCE_BINARY     [/ipscheduler-ipam]   the plugin in the image
#   CNI_BIN_DIR       [/host/opt/cni/bin]   the host's /opt/cni/bin
#   CNI_NET_DIR       [/host/etc/cni/net.d] the host's /etc/cni/net.d
#   KUBECONFIG_NAME   [ipscheduler-ipam.kubeconfig]
#   REFRESH_SECONDS   [60]
#   KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT (set by the kubelet)
# Exit status: 0 after --once, non-zero with a message on stderr on any error.
set -eu

SA_DIR=${SA_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
SOURCE_BINARY=${SOURCE_BINARY:-/ipscheduler-ipam}
CNI_BIN_DIR=${CNI_BIN_DIR:-/host/opt/cni/bin}
CNI_NET_DIR=${CNI_NET_DIR:-/host/etc/cni/net.d}
KUBECONFIG_NAME=${KUBECONFIG_NAME:-ipscheduler-ipam.kubeconfig}
REFRESH_SECONDS=${REFRESH_SECONDS:-60}

log() { echo "ipscheduler-ipam-install: $*" >&2; }
die() { log "error: $*"; exit 1; }

once=false
for arg in "$@"; do
  case "$arg" in
    --once) once=true ;;
    *) die "unknown argument $arg (usage: install.sh [--once])" ;;
  esac
done

: "${KUBERNETES_SERVICE_HOST:?is not set (not running in a pod?)}"
: "${KUBERNETES_SERVICE_PORT:?is not set (not running in a pod?)}"
case "$REFRESH_SECONDS" in '' | *[!0-9]*) die "REFRESH_SECONDS must be a whole number, got '$REFRESH_SECONDS'" ;; esac
[ -f "$SOURCE_BINARY" ] || die "plugin binary $SOURCE_BINARY not found"
[ -d "$CNI_BIN_DIR" ] || die "CNI bin directory $CNI_BIN_DIR not found (is the host's /opt/cni/bin mounted?)"
[ -d "$CNI_NET_DIR" ] || die "CNI config directory $CNI_NET_DIR not found (is the host's /etc/cni/net.d mounted?)"

host=$KUBERNETES_SERVICE_HOST
case "$host" in *:*) host="[$host]" ;; esac # an IPv6 address
server="https://$host:$KUBERNETES_SERVICE_PORT"

install_binary() {
  tmp="$CNI_BIN_DIR/.ipscheduler-ipam.tmp.$$"
  cp "$SOURCE_BINARY" "$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$CNI_BIN_DIR/ipscheduler-ipam"
  log "installed $CNI_BIN_DIR/ipscheduler-ipam"
}

# The token and CA as written last; the kubeconfig is rewritten when either changes.
fingerprint() { cat "$SA_DIR/token" "$SA_DIR/ca.crt" | md5sum; } # md5sum: in every busybox build (Debian's has no cksum)

write_kubeconfig() {
  [ -s "$SA_DIR/token" ] || die "no ServiceAccount token at $SA_DIR/token (automountServiceAccountToken?)"
  [ -s "$SA_DIR/ca.crt" ] || die "no CA certificate at $SA_DIR/ca.crt"
  token=$(cat "$SA_DIR/token")
  ca=$(base64 <"$SA_DIR/ca.crt" | tr -d '\n')
  out="$CNI_NET_DIR/$KUBECONFIG_NAME"
  tmp="$CNI_NET_DIR/.$KUBECONFIG_NAME.tmp.$$"
  (
    umask 077
    cat >"$tmp" <<EOF
# Written by ipscheduler-ipam's installer (deploy/: DaemonSet ipscheduler-ipam);
# rewritten when the ServiceAccount token rotates. Do not edit.
apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster:
      server: "$server"
      certificate-authority-data: "$ca"
users:
  - name: ipscheduler-ipam
    user:
      token: "$token"
contexts:
  - name: ipscheduler-ipam
    context:
      cluster: local
      user: ipscheduler-ipam
current-context: ipscheduler-ipam
EOF
  )
  chmod 0600 "$tmp"
  mv -f "$tmp" "$out"
  log "wrote $out (server $server)"
}

install_binary
write_kubeconfig
last=$(fingerprint)
$once && exit 0

trap 'log "stopping"; exit 0' TERM INT
while :; do
  sleep "$REFRESH_SECONDS" &
  wait $! || true
  now=$(fingerprint) || die "cannot read $SA_DIR"
  if [ "$now" != "$last" ]; then
    write_kubeconfig
    last=$now
  fi
done
