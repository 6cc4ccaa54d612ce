#!/usr/bin/env bash
# The test command (README; CI runs it through .ci/run): builds everything and runs every test
# stage. The stages live with the other CI scripts in tools/ci/ (run_tests.sh, fuzz.sh);
# docs/testing.md describes them. SAM_STAGES, SAM_BUILD_DIR, SAM_JOBS and SAM_DATA_DIR pass through.
exec "$(dirname "$0")/ci/run_tests.sh" "$@"
