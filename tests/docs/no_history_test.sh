#!/usr/bin/env bash
# The repository's text is for users: no dates, session or issue numbers, experiment rounds,
# machine paths, or "tried and not kept" passages (that history belongs in commit messages).
#
#   no_history_test.sh SOURCE_DIR      checks README.md, docs/**/*.md, format/FORMAT.md,
#                                      corpora/README.md and every tracked source file
#                                      (*.cc, *.h, *.c, *.py, *.sh, CMakeLists.txt, *.cmake, *.in)
#   no_history_test.sh --self-test     checks the patterns themselves: each flagged phrase is
#                                      caught, each ordinary phrase that resembles one is not
#
# Whole files are checked, not only comments: a source line that is not a comment rarely holds
# such a phrase, and a string or identifier that does is history too. Exit 0 when clean, 1 with
# FILE:LINE: TEXT for every finding.
set -uo pipefail

# One pattern per kind of history (Perl regular expressions, grep -P).
patterns=(
  'date|\b20\d\d-[01]\d-[0-3]\d\b'
  # "session 26", "sessions 20-25"; not a count of sessions in a flag ("--sessions 1,8") nor the
  # C API's "session 1 is NULL" (a session's index in a batch).
  'session number|(?<!-)\b[Ss]essions? \d+(?:-\d+)?\b(?! is NULL)(?!,\d)'
  'issue number|\b[Ii]ssue #?\d+|#\d+(?:\x27s| section)'
  # "round 2", "second round (bench-step ...)", "a second round of tuning" "The policy's step, second round (bench-step)"; not a loop's rounds.
  'experiment round|\b[Rr]ound \d+\b|\b(?:[Ff]irst|[Ss]econd|[Tt]hird|[Ll]ast) round (?:\(|of (?:tuning|measurement|experiment))'
  # Absolute paths of a machine ("$tmp/work/x", "$tmp"/work/x: a folder inside a temporary one).
  'machine path|(?<![\w$}.~-])(?<!\w")/(?:work|home|root)/'
  # "tried and dropped", "was not kept", "Also tried", "dropped (no gain"; not "is not kept"
  # (a node that a walk leaves out) nor "are tried" (candidates tried in turn).
  'tried-and-not-kept|\b[Tt]ried\b[^.]{0,80}\b(?:dropped|not kept|reverted)\b|\b(?:was|were) not kept\b|\band dropped\b|\b[Aa]lso tried\b|\bdropped \(no gain'
)

check() {  # check FILE...: prints findings, returns 1 if any
  local found=0 entry name regex
  for entry in "${patterns[@]}"; do
    name=${entry%%|*}
    regex=${entry#*|}
    if grep -HnP -- "$regex" "$@" | sed "s/^/[$name] /"; then found=1; fi
  done
  return $found
}

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  bad=("measured on 2026-11-30" "at session 26's start" "sessions 20-25 used" "issue #10's target"
       "the #10 section 4 target" "in round 2" "a second round of tuning" "The policy's step, second round (bench-step)" "see /work/art/raw.jsonl"
       "--index /home/me/x.sam" "tried a joint cell and dropped it" "a switch that was not kept"
       "Also tried on the dev traces" "dropped (no gain at equal tokens)")
  good=("a round trip of every variant" "session 1 is NULL" "--sessions 1,8,64" "\$tmp/work/docs.jsonl"
        "its parent is not kept" "shorter suffixes are tried, whose first" "the KV is dropped"
        "FORMAT 1.0 section 10" "ids 2026 and 11" "a ~/work/ folder" "\"\$tmp\"/work/a.out"
        "the second round hits the cache" "a kept node's parent was dropped")
  status=0
  for phrase in "${bad[@]}"; do
    printf '%s\n' "$phrase" > "$tmp/bad.md"
    if check "$tmp/bad.md" > /dev/null; then echo "FAIL: not caught: $phrase"; status=1; fi
  done
  for phrase in "${good[@]}"; do
    printf '%s\n' "$phrase" > "$tmp/good.md"
    if ! check "$tmp/good.md" > /dev/null; then echo "FAIL: caught but ordinary: $phrase"; status=1; fi
  done
  ((status == 0)) && echo "no_history_test --self-test: ${#bad[@]} phrases caught, ${#good[@]} passed"
  exit $status
fi

root=${1:?usage: no_history_test.sh SOURCE_DIR | --self-test}
cd "$root" || exit 1
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files -co --exclude-standard -- README.md 'docs/*.md' format/FORMAT.md \
    corpora/README.md '*.cc' '*.h' '*.c' '*.py' '*.sh' '*CMakeLists.txt' '*.cmake' '*.in' \
    | while read -r f; do [[ -f $f ]] && echo "$f"; done)
else  # a source tree without git (an unpacked release)
  mapfile -t files < <(find . -path ./build -prune -o -type f \( -name '*.md' -path './docs/*' -o \
    -name README.md -o -name FORMAT.md -o -name '*.cc' -o -name '*.h' -o -name '*.c' -o -name '*.py' \
    -o -name '*.sh' -o -name CMakeLists.txt -o -name '*.cmake' -o -name '*.in' \) -print)
fi
# This file names the patterns it looks for, and so is the one file not checked.
files=("${files[@]/tests\/docs\/no_history_test.sh/}")
mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -v '^$')
((${#files[@]})) || { echo "no_history_test: no files found under $root"; exit 1; }
if check "${files[@]}"; then
  echo "no_history_test: ${#files[@]} files, no history found"
else
  echo "no_history_test: history found (above); it belongs in commit messages, not the repository's text"
  exit 1
fi
