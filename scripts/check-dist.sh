#!/usr/bin/env bash
# Checks a source tarball: check-dist.sh TARBALL
# - it ships every file the repository tracks (but CI's own and git's);
# - it ships nothing built or measured in the tree (bench programs and
#   results, object files, executables).
set -uo pipefail
tarball=$1
top=$(cd "$(dirname "$0")/.." && pwd)
list=$(mktemp) bad=0
trap 'rm -f "$list"' EXIT

tar tzf "$tarball" | sed 's|^[^/]*/||' | grep -v '/$' | sort >"$list"

if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  missing=$(git -C "$top" ls-files | grep -vE '^\.ci/|(^|/)\.git(ignore|keep)$' \
              | sort | comm -23 - "$list")
  if [ -n "$missing" ]; then
    echo "tracked but not in $tarball:"; echo "$missing"; bad=1
  fi
fi

built=$(grep -E '^bench/(nbdbench|syncbound)$|^bench/out/|\.(o|lo|la|so)$|(^|/)\.libs/|__pycache__' "$list")
if [ -n "$built" ]; then
  echo "built or measured files in $tarball:"; echo "$built"; bad=1
fi

dir=$(mktemp -d)
tar xzf "$tarball" -C "$dir"
elves=$(find "$dir" -type f -exec sh -c 'head -c 4 "$1" | grep -q "^.ELF" && echo "$1"' _ {} \; \
          | sed "s|^$dir/[^/]*/||")
rm -rf "$dir"
if [ -n "$elves" ]; then
  echo "executables in $tarball:"; echo "$elves"; bad=1
fi
exit $bad
