#!/bin/bash
# Issue 16's checks on a lent many-core machine (the `device` tool's nvidia-h100/h200 kinds:
# 16 cores, no network), in one call.  Prepared here, on the 2-core machine:
#
#   echo /.whl/ >> .git/info/exclude
#   python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       --platform manylinux1_x86_64 -d .whl numpy==2.4.6 mpich==5.0.2 mpi4py==4.1.2 \
#       randomgen==2.5.1 astropy==8.0.2 pyerfa==2.0.1.5 astropy-iers-data   # 46 MB
#   git archive --format=tar.gz -o .whl/base.tar.gz REV -- . ':!docs/*.png' ':!docs/*.json'
#
# then `run` with carry [".whl"] and the command `bash bench/device_check.sh scaling` (P = 1-16
# threads, ranks and layouts at N = 1e5 and 1e6, then the compute per rank: about 260 s) or
# `bash bench/device_check.sh ab` (this tree against .whl/base.tar.gz, 16 ranks, three
# alternated rounds at N = 1e6 and 1e5, then the compute per rank at P = 16: about 170 s).
# The machine's python3 (3.12, with numba, scipy, h5py) takes the carried wheels through
# PYTHONPATH (its own numpy 2.5 breaks its numba-cuda); MPICH's library through
# LD_LIBRARY_PATH.  Results under $OUT.  Knobs for a dry run here: SKIP_PIP=1, NP, NS, ROUNDS,
# CSN, BASE (see below).
set -u
what=${1:-scaling}
T0=$(date +%s)
el() { echo "== $1 at $(( $(date +%s) - T0 )) s"; }
NP=${NP:-16}; NS=${NS:-"1000000 100000"}; ROUNDS=${ROUNDS:-"1 2 3"}; CSN=${CSN:-1000000}
if [ -z "${SKIP_PIP:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix /tmp/pfx \
    .whl/*.whl > "$OUT/pip.txt" 2>&1 || { tail -5 "$OUT/pip.txt"; exit 1; }
  export PYTHONPATH=/tmp/pfx/lib/python3.12/site-packages LD_LIBRARY_PATH=/tmp/pfx/lib \
    PATH=/tmp/pfx/bin:$PATH
fi
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
MPIEXEC=$(command -v mpiexec)
python3 -c "import numpy, numba, mpi4py.MPI as M; print(numpy.__version__, numba.__version__, M.Get_library_version()[:20])" || exit 1
lscpu > "$OUT/lscpu.txt"
NEW=$PWD
BASE=${BASE:-/tmp/base}
el setup
if [ "$what" = ab ]; then
  mkdir -p "$BASE" && tar xzf .whl/base.tar.gz -C "$BASE" || exit 1
  # the two trees' kernels (cache keyed by their sources) compile side by side
  (cd "$BASE" && timeout 200 python3 bench/bench_step.py 20000 3 1 > "$OUT/warm_base.txt" 2>&1; echo "warm base rc=$?") &
fi
timeout 220 python3 bench/bench_step.py 20000 3 1 > "$OUT/warm.txt" 2>&1; echo "warm rc=$?"
wait
el warm
if [ "$what" = scaling ]; then
  timeout 240 python3 bench/scaling.py measure "$OUT/scaling.json" --p 1,2,4,8,16 \
    --n 100000,1000000 --mpiexec "$MPIEXEC" --timeout 90 2>&1 | grep -v '^|'
  pkill -f bench_step; pkill -f hydra_pmi; pkill -f comm_bench
  el scaling
  timeout 130 python3 bench/compute_scaling.py measure "$OUT/cs.json" --p 1,2,4,8,16 \
    --n 100000,1000000 --mpiexec "$MPIEXEC" --timeout 60 2>&1 | tail -20
elif [ "$what" = ab ]; then
  for round in $ROUNDS; do
    for tree in "$BASE" "$NEW"; do
      for n in $NS; do
        s=6; [ "$n" -le 100000 ] && s=15
        line=$(cd "$tree" && timeout 90 "$MPIEXEC" -n "$NP" python3 bench/bench_step.py "$n" "$s" 1 2>/dev/null | grep '^BENCH')
        echo "AB $round $(basename "$tree") $n ${line:6}" >> "$OUT/ab.txt"
        python3 -c "import json,sys; d=json.loads(sys.argv[1]); p=d['parts_us_per_star']; print(sys.argv[2], round(d['us_per_star_step'],4), {k: round(v,4) for k,v in p.items()})" "${line:6}" "$round $(basename "$tree") $n" 2>/dev/null || echo "$round $tree $n failed"
      done
    done
  done
  el ab
  for tree in "$BASE" "$NEW"; do
    (cd "$tree" && timeout 60 "$MPIEXEC" -n "$NP" python3 bench/compute_scaling.py one "$CSN" 6 2>/dev/null | grep '^COMPUTE' > "$OUT/cs_$(basename "$tree").txt")
    python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read()[8:]); r=d['ranks']; print(sys.argv[2], round(max(x['compute_ms'] for x in r),1), {k: round(max(x['parts_ms'][k] for x in r),2) for k in r[0]['parts_ms']})" "$OUT/cs_$(basename "$tree").txt" "$(basename "$tree")"
  done
else
  echo "usage: bash bench/device_check.sh scaling|ab"; exit 2
fi
el done
