#!/usr/bin/env bash
# The whole device run of gen_setups.py (issue 19's labelled set-ups), from the repository root of
# a GPU machine with torch:
#
#     OUT=/some/empty/folder bash tests/gpu/run_setups.sh [NAME,NAME,...]
#
# The script is copied to a neutral folder, /home/ml/train/train.py, and runs there, so the
# snapshots' frames name /home/ml/train/train.py and no path of ours. Every set-up runs in its own
# subprocess (4 at a time, each with its own time limit; all of them within 450 s), then the
# snapshots, truth files, per-set-up logs and summary.json are packed into ONE archive,
# $OUT/setups.tar.xz (or .tar.gz without xz), beside $OUT/gen_setups.log. Nothing is downloaded.
set -uo pipefail

out=${OUT:?set OUT to the folder the results go to}
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
work=/home/ml/train

mkdir -p "$work" "$out"
cp "$repo/tests/gpu/gen_setups.py" "$work/train.py"
cd "$work"
rm -rf setups

"$python" train.py setups "$@" >"$out/gen_setups.log" 2>&1
status=$?
cat "$out/gen_setups.log"

if command -v xz >/dev/null; then
  tar -cJf "$out/setups.tar.xz" setups
else
  tar -czf "$out/setups.tar.gz" setups
fi
ls -l "$out"
exit $status
