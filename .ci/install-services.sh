#!/usr/bin/env bash
# Installs the real services the fleet tests start on loopback ports, from Debian's packages:
#   - redis-server  (the shared task and session store of a fleet: `store: redis://...`)
#   - nginx-light   (the plain round-robin load balancer in front of three replicas)
#   - openssl       (the CA and certificate the TLS store test generates for `rediss://`;
#                    Debian's redis-server is built with TLS)
#   - valgrind      (callgrind: the serving bench's instruction counts and its speed guard)
#   - strace        (the speed guard's system calls per call: `strace -f -c`)
#   - chromium, chromium-driver (the headless browser and its WebDriver server the console
#                    tests drive: /usr/bin/chromium, /usr/bin/chromedriver)
#   - docker-registry (the OCI distribution registry the install tests publish plugins to and
#                    add them from: /usr/bin/docker-registry)
# The tests run their own instances (own temporary directories and ports); the packages' system
# services are not needed and are not started here.
#
# Idempotent and quick when both are there: nothing is installed then. Installing needs root (as in
# CI); without root a missing package is reported and the script exits non-zero.
set -euo pipefail

# `nginx` lives in /usr/sbin, which a non-root PATH may lack.
have() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]; }

missing=()
have redis-server || missing+=(redis-server)
have nginx || missing+=(nginx-light)
have openssl || missing+=(openssl)
have valgrind || missing+=(valgrind)   # the speed guard (.ci/run)
have strace || missing+=(strace)       # ... its system-call counts
have docker-registry || missing+=(docker-registry)   # the install tests' OCI registry
have chromium || missing+=(chromium)                 # the console tests' browser
have chromedriver || missing+=(chromium-driver)      # ... and its WebDriver server

if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "error: ${missing[*]} missing and not root: run 'apt-get install -y ${missing[*]}' as root" >&2
        exit 1
    fi
    echo "   installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # Package installs must not start the system services (the tests start their own instances).
    policy=/usr/sbin/policy-rc.d
    created_policy=0
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        created_policy=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [[ $created_policy == 1 ]]; then rm -f "$policy"; fi
fi

nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
echo "   $(redis-server --version | cut -d' ' -f1-3)"
echo "   $("$nginx_bin" -v 2>&1)"
echo "   $(openssl version)"
echo "   $(chromium --version 2>/dev/null | head -1), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)"
echo "   docker-registry $(docker-registry --version 2>/dev/null | head -1 || echo '(version unknown)')"
