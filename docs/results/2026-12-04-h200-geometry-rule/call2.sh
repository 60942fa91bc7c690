. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s)
{ timeout 120 python3 -m pytest -q -x tests/gpu/test_grouped.py -k "one_form or union_in_clusters"; timeout 200 python3 -m pytest -q -x tests/gpu/test_dispatch_model_gpu.py; } > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; tail -3 $OUT/tests.txt
b() { # name op variants hd g kv shapes [env]
  t0=$(date +%s)
  env ${8:-} timeout 150 python3 -m strata_kernels bench --op $2 --device cuda $3 --format int8 \
    --head-dim $4 --group $5 --n-head-kv $6 --shapes $7 --reps 10 --methods plugin --json $OUT/$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
}
b dec_g4kv8 decode --variant=flash,grouped 128 4 8 32768x8,32768x16,32768x24,32768x32,32768x48,32768x64,32768x128,32768x256,131072x16,131072x32,131072x64,131072x128
b dec_g4kv2 decode --variant=flash,grouped 128 4 2 32768x32,32768x64,32768x96,32768x128,32768x256
b pro_g4 prompt --variant=grouped,v2 128 4 2 32768x2048,2100x256,1500x1500,4096x256
b pro_g4_c1 prompt --variant=grouped 128 4 2 32768x2048,2100x256,1500x1500,4096x256 STRATA_GROUPED_UNION_CLUSTER=1
b auto_g4kv8 decode "" 128 4 8 32768x16,32768x32,32768x64
for f in /tmp/dec_*.txt /tmp/pro_*.txt /tmp/auto_*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
