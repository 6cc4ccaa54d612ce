# Sourced by the command-line tests: expect CODE PATTERN -- COMMAND... runs the
# command and checks its exit status and that its output (stdout and stderr)
# matches PATTERN (grep); a mismatch prints FAIL and sets fail=1.
fail=0
expect() {  # expect CODE PATTERN -- command...
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -ne $code ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: '$*' exited $rc (want $code), output: $out"; fail=1
  else
    echo "ok: $* -> $rc"
  fi
}
