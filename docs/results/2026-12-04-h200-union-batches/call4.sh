. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s)
{ timeout 240 python3 -m pytest -q tests/gpu/test_grouped.py -k "one_form or batches or union_in_clusters"; timeout 150 python3 -m pytest -q -x tests/gpu/test_dispatch_model_gpu.py; } > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; grep -E "passed|failed|Error" $OUT/tests.txt | tail -5
b() { # name op variants hd g kv shapes [env]
  t0=$(date +%s)
  env ${8:-} timeout 150 python3 -m strata_kernels bench --op $2 --device cuda $3 --format int8 \
    --head-dim $4 --group $5 --n-head-kv $6 --shapes $7 --reps 10 --methods plugin --json /tmp/j_$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
}
P4=32768x2048,131072x2048,131072x4096,262144x2048,524288x2048
b pro_g4 prompt --variant=grouped 128 4 2 $P4
b pro_g4_c8 prompt --variant=grouped 128 4 2 131072x2048,131072x4096 STRATA_GROUPED_UNION_CLUSTER=8
b pro_g4_b prompt --variant=grouped 128 4 2 $P4
b dec_g4 decode "" 128 4 8 32768x64,131072x64,131072x256
for f in /tmp/pro_*.txt /tmp/dec_*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$2,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
python3 -c "
import json, glob, os
print(json.dumps({os.path.basename(p)[2:-5]: json.load(open(p)) for p in sorted(glob.glob('/tmp/j_*.json'))}))" > $OUT/bench_all.json
