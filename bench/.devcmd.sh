set -u
OUT=${OUT:-/tmp/o}
bash bench/device.sh > "$OUT/device-run.txt" 2>&1
echo "device.sh exit=$?" >> "$OUT/device-run.txt"
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH"
inv=/tmp/gpuprov-device.yml
v() { /usr/bin/time -f "$1 wall %e s cpu %U+%S" python3 -m orchestrator.cli verify -i "$inv" --json > /tmp/v.json 2>/tmp/v.err; rc=$?; tail -1 /tmp/v.err; python3 -c "
import json; d=json.load(open('/tmp/v.json')); h=list(d['hosts'].values())[0] if isinstance(d['hosts'],dict) else d['hosts'][0]
print('  rc=$rc', {k: v['seconds'] for k, v in h['timings']['stages'].items()}, d['summary'] if 'summary' in d else '')"; }
{
for i in 1 2 3 4 5 6; do v cached; done
for i in 1 2 3; do rm -rf artifacts/verify-reads; v nocache; done
for i in 1 2 3; do /usr/bin/time -f "detect wall %e s cpu %U+%S" python3 -m orchestrator.cli detect -i "$inv" >/dev/null 2>/tmp/d.err; tail -1 /tmp/d.err; done
ls artifacts/verify-reads; python3 -c "import json; print(len(json.load(open('artifacts/verify-reads/h200-device.json'))['commands']), 'commands kept')"
} > "$OUT/verify-runs.txt" 2>&1
cat "$OUT/verify-runs.txt"; grep -E "^=== |exit=|real" "$OUT/device-run.txt" | head -40
