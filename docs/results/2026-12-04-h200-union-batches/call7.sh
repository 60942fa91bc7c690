. ci/device_prelude.sh; device_env > /dev/null; . ci/sanitize.sh
t0=$(date +%s); GEOMS=256x12,128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
grep -o "libstrata_sm_90.so ([0-9.]* MB)" /tmp/build.txt
t0=$(date +%s)
timeout 150 python3 -m pytest -q tests/gpu/test_grouped.py -k "one_form or batches or union_in_clusters" > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; tail -2 $OUT/tests.txt
b() { # name op variants hd g kv shapes [env]
  t0=$(date +%s)
  env ${8:-} timeout 100 python3 -m strata_kernels bench --op $2 --device cuda $3 --format int8 \
    --head-dim $4 --group $5 --n-head-kv $6 --shapes $7 --reps 10 --methods plugin --json /tmp/j_$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
}
b pro_g4 prompt --variant=grouped 128 4 2 32768x2048,131072x2048,524288x2048
b pro_g2 prompt --variant=grouped 128 2 2 131072x2048,524288x2048
b dec_g12 decode --variant=flash,grouped 256 12 2 32768x64,131072x64,131072x256,262144x64
b pro_g12 prompt --variant=grouped 256 12 2 32768x2048
for f in /tmp/pro_*.txt /tmp/dec_*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$2,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
run_sanitizers 100 python3 ci/sanitize_union_batches.py; echo "sanitizers rc $?"
python3 -c "
import json, glob, os
print(json.dumps({os.path.basename(p)[2:-5]: json.load(open(p)) for p in sorted(glob.glob('/tmp/j_*.json'))}))" > $OUT/bench_all.json
