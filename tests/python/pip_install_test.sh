#!/bin/sh
# The samdecoding distribution, installed with pip into a fresh virtual
# environment (offline: --no-index, --no-build-isolation, the system's
# setuptools, wheel and numpy), passes the Python tests from there, with no
# PYTHONPATH: the installed package, its version, its numpy dependency and
# its SGLang entry point (test_engines's spawned scheduler loads the plugin
# through them).
#   pip_install_test.sh PYTHON NATIVE_MODULE PACKAGE_DIR TESTS_DIR VERSION
set -eu
python=$1 module=$2 package=$3 tests=$4 version=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv --system-site-packages "$tmp/venv"
cp -R "$package" "$tmp/src"  # pip builds in the source folder: a copy keeps the tree clean
rm -rf "$tmp/src/build" "$tmp/src/"*.egg-info
SAM_NATIVE_MODULE=$module SAM_VERSION=$version \
  "$tmp/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$tmp/src"
cd "$tests"
unset PYTHONPATH
SAM_REQUIRE_INSTALLED=1 "$tmp/venv/bin/python" -m unittest test_samdecoding test_engines
