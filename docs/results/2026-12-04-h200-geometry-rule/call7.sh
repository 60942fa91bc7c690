. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
timeout 300 python3 -m pytest -q tests/gpu/test_grouped.py tests/gpu/test_flash_decode.py > $OUT/tests.txt 2>&1
echo "tests rc $?"; tail -3 $OUT/tests.txt
