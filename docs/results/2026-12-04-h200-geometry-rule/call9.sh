. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
timeout 120 python3 -m strata_kernels bench --op decode --device cuda --format int8 --shapes 32768x1,32768x64,32768x256,131072x256,262144x64 \
  --reps 20 --methods plugin,copy-floor --json $OUT/decode.json > $OUT/decode.txt 2>&1; echo "decode rc $?"
timeout 120 python3 -m strata_kernels bench --op prompt --device cuda --format int8 --shapes 32768x2048,2100x256 \
  --reps 10 --methods plugin --json $OUT/prompt.json > $OUT/prompt.txt 2>&1; echo "prompt rc $?"
grep -E "^[0-9]+x" $OUT/decode.txt $OUT/prompt.txt | awk '{print $1,$3,$4,$5,$6,$7}'
