. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s)
{ timeout 200 python3 -m pytest -q tests/gpu/test_grouped.py -k "one_form or union_in_clusters"; timeout 200 python3 -m pytest -q -x tests/gpu/test_dispatch_model_gpu.py; } > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; grep -E "passed|failed" $OUT/tests.txt
b() { # name op variants hd g kv shapes [env]
  t0=$(date +%s)
  env ${8:-} timeout 120 python3 -m strata_kernels bench --op $2 --device cuda $3 --format int8 \
    --head-dim $4 --group $5 --n-head-kv $6 --shapes $7 --reps 10 --methods plugin --json /tmp/j_$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
}
b pro_g4 prompt --variant=grouped,v2 128 4 2 1500x1500,32768x4096
b pro_g4_c1 prompt --variant=grouped 128 4 2 1500x1500,32768x4096 STRATA_GROUPED_UNION_CLUSTER=1
b dec_g4 decode --variant=flash,grouped 128 4 8 32768x2128,131072x272
b dec_g4_c1 decode --variant=grouped 128 4 8 32768x2128,131072x272 STRATA_GROUPED_UNION_CLUSTER=1
b dec_g2 decode --variant=flash,grouped 128 2 8 32768x16,32768x32,32768x64,32768x128
b pro_g2 prompt --variant=grouped,v2 128 2 2 2100x256,32768x2048
b pro_g2_c1 prompt --variant=grouped 128 2 2 2100x256,32768x2048 STRATA_GROUPED_UNION_CLUSTER=1
for f in /tmp/pro_*.txt /tmp/dec_*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
python3 -c "
import json, glob, os
print(json.dumps({os.path.basename(p)[2:-5]: json.load(open(p)) for p in sorted(glob.glob('/tmp/j_*.json'))}))" > $OUT/bench_all.json
