#!/usr/bin/env bash
# Real Sigstore keyless signatures for the tests, taken from PyPI packages (never copied into
# this repository): the pypi-attestations sdist's test assets (bundles and PEP 740 attestations
# with the files they sign, made by known identities on Sigstore's public-good and staging
# instances), the sigstore wheel's trusted roots of both instances, and from crates.io two
# published crates of sigstore-rust that carry cases of Sigstore's conformance suite
# (sigstore-bundle's happy-path DSSE bundle; sigstore-verify's copy of the suite's "a.txt", the
# artifact that bundle signs).
#
# Usage: .ci/sigstore-assets.sh DIR [PYTHON]       then WI_SIGSTORE_ASSETS=DIR
set -euo pipefail
dir=${1:?usage: .ci/sigstore-assets.sh DIR [PYTHON]}
py=${2:-python3}
mkdir -p "$dir"
cd "$dir"
if [ ! -d pypi_attestations-0.0.31/test/assets ]; then
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        'pypi-attestations==0.0.31' -d .
    tar xzf pypi_attestations-0.0.31.tar.gz
fi
if [ ! -d sigstore-4.5.1/sigstore/_store ]; then
    "$py" -m pip download --quiet --disable-pip-version-check --no-deps 'sigstore==4.5.1' -d .
    rm -rf sigstore-4.5.1.tmp
    "$py" -m zipfile -e sigstore-4.5.1-py3-none-any.whl sigstore-4.5.1.tmp
    mv sigstore-4.5.1.tmp sigstore-4.5.1
fi
# Each crate checked against the SHA-256 crates.io's index records for it.
for pinned in \
    sigstore-bundle-0.15.1:442bc4f672eef040397e65d4ae34ca1b1dc8140b1a35b1246e0b219ce5f4e571 \
    sigstore-verify-0.15.1:465f37d73c80fc6a2fa519d1337befab2026fce47f490181f72842aa56d401e1; do
    c=${pinned%%:*}
    sum=${pinned#*:}
    if [ ! -d "$c" ]; then
        name=${c%-*}
        "$py" -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
            "https://static.crates.io/crates/$name/$c.crate" "$c.crate"
        echo "$sum  $c.crate" | sha256sum -c --quiet -
        rm -rf "$c.tmp" && mkdir "$c.tmp"
        tar xzf "$c.crate" -C "$c.tmp"
        mv "$c.tmp/$c" "$c" && rm -rf "$c.tmp" "$c.crate"
    fi
done
