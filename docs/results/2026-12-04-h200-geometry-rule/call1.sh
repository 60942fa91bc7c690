. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
b() { # name hd g kv shapes
  t0=$(date +%s)
  timeout 170 python3 -m strata_kernels bench --op decode --device cuda --variant flash,grouped --format int8 \
    --head-dim $2 --group $3 --n-head-kv $4 --shapes $5 --reps 10 --methods plugin --json $OUT/$1.json > $OUT/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
}
b g128x4kv8 128 4 8 32768x1,32768x8,32768x16,32768x32,32768x48,32768x64,32768x128,32768x256,131072x32,131072x64,131072x128
b g128x8kv8 128 8 8 32768x1,32768x8,32768x16,32768x32,32768x48,32768x64,32768x128,32768x256,131072x32,131072x64,131072x128
b g128x8kv1 128 8 1 32768x16,32768x32,32768x64,32768x96,32768x128,32768x192,32768x256,131072x128,131072x256
for f in $OUT/g*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$4,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
