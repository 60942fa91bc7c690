. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4,128x2 build_plugins /tmp/b1 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s)
timeout 380 python3 -m pytest -q tests/gpu/test_grouped.py tests/gpu/test_flash_decode.py > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; tail -5 $OUT/tests.txt
