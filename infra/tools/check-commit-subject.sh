#!/usr/bin/env bash
# Refuses a commit message whose subject (its first line) is longer than 72 characters:
# the subject says what changed, the body says why and gives the figures. Called by
# pre-commit's commit-msg stage with the message file's path.
set -euo pipefail
subject=$(head -n 1 "$1")
length=${#subject}
if [ "$length" -gt 72 ]; then
  echo "commit subject is $length characters, at most 72: put the details in the body" >&2
  echo "  $subject" >&2
  exit 1
fi
