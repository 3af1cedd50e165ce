#!/usr/bin/env bash
# Makes a self-signed CA and one certificate for a test cluster's servers (and, for mTLS, one
# for its clients), with openssl. Not for production: use your organisation's CA there.
#
#   deploy/tls/make-certs.sh DIR [NAME...]
#
# NAME: the host names and IP addresses the servers are reached by (subject alternative
# names; default: localhost 127.0.0.1 replay learner serve fleetrl-replay
# fleetrl-learner fleetrl-serve).
# Writes DIR/ca.pem, DIR/server.pem + DIR/server.key, DIR/client.pem + DIR/client.key.
# Point the roles at them (README, "Security"):
#   servers: FLEETRL_TLS_CERT=DIR/server.pem FLEETRL_TLS_KEY=DIR/server.key
#   clients: FLEETRL_TLS_CA=DIR/ca.pem
#   mTLS:    servers add FLEETRL_TLS_CLIENT_CA=DIR/ca.pem; clients add
#            FLEETRL_TLS_CLIENT_CERT=DIR/client.pem FLEETRL_TLS_CLIENT_KEY=DIR/client.key
set -euo pipefail
dir="${1:?usage: make-certs.sh DIR [NAME...]}"
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(localhost 127.0.0.1 replay learner serve fleetrl-replay fleetrl-learner fleetrl-serve)
command -v openssl >/dev/null || { echo "error: openssl is not installed" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
san=""
for n in "${names[@]}"; do
  if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
san="${san%,}"
umask 077
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=fleetrl test CA" \
  -keyout ca.key -out ca.pem 2>/dev/null
issue() { # name, extended key usage, SAN (may be empty)
  openssl req -newkey rsa:2048 -nodes -subj "/CN=fleetrl $1" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  {
    echo "extendedKeyUsage=$2"
    [ -z "$3" ] || echo "subjectAltName=$3"
  } > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server serverAuth "$san"
issue client clientAuth ""
rm -f ca.srl
echo "wrote $dir/{ca.pem,server.pem,server.key,client.pem,client.key} (server names: ${names[*]})" >&2
