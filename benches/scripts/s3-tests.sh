#!/usr/bin/env bash
# Runs ceph/s3-tests, as shipped, against `hipobj serve` and reports passes per mode.
#
#   benches/scripts/s3-tests.sh S3TESTS_DIR [MODE...] [-- PYTEST_ARGS...]
#
# S3TESTS_DIR: a checkout of https://github.com/ceph/s3-tests (this script clones nothing;
#   docs/gateway.md names the commit the recorded run used). Its Python requirements must be
#   importable by $PYTHON (default python3): pip install -r S3TESTS_DIR/requirements.txt
#   pytest-timeout.
# MODE: dir (hipobj serve --root), soft (--root with --fabric soft), upstream (hipobj serve
#   --upstream in front of s3s-fs), s3s-fs (s3s-fs directly, the upstream baseline).
#   Default: all four.
#
# The gateway and s3s-fs each accept one key, so the conf this script writes gives s3-tests'
# "alt" and "tenant" users the main user's key: every test's setup and teardown lists and
# empties buckets as each of the three users, which a server that knows one key answers with
# InvalidAccessKeyId (every test then errors). Tests that need a second identity fail.
#
# The tests are those listed in benches/s3-tests/subset.txt (test_s3.py, selected by the rule
# written there). Needs target/release/hipobj (cargo build --release -p hipobj-cli) and, for
# upstream and s3s-fs, s3s-fs (benches/scripts/install-s3s-fs.sh). `passed` counts tests with
# neither a failure nor an error (pytest also counts a test whose teardown errs as passed).
# Results, the gateway's access log and pytest's JUnit XML go to $OUT (default
# target/s3-tests/<UTC time>); summary.tsv has one line per mode.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
[ $# -ge 1 ] || { sed -n "2,/^set -euo/p" "$0" | grep "^#"; exit 2; }
S3T="$(cd "$1" && pwd)"; shift
MODES=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do MODES+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#MODES[@]} -gt 0 ] || MODES=(dir soft upstream s3s-fs)
PYTHON="${PYTHON:-python3}"
HIPOBJ="${HIPOBJ:-$REPO/target/release/hipobj}"
OUT="${OUT:-$REPO/target/s3-tests/$(date -u +%Y-%m-%dT%H%MZ)}"
mkdir -p "$OUT"
S3SFS="$(command -v s3s-fs || true)"
[ -n "$S3SFS" ] || for c in "$HOME/.cargo/bin/s3s-fs" "$REPO/.tools/bin/s3s-fs"; do [ -x "$c" ] && S3SFS="$c"; done
AK=0555b35654ad1656d804
SK='h7GhxuBLTrlhVUyxSPUKUV8r/2EI4ngqJxD7iBdBYLhwluN30JaT3Q=='

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

write_conf() { # $1 port, $2 file
    cat >"$2" <<CONF
[DEFAULT]
host = 127.0.0.1
port = $1
is_secure = False
ssl_verify = False
[fixtures]
bucket prefix = s3t-{random}-
iam name prefix = s3-tests-
iam path prefix = /s3-tests/
[s3 main]
display_name = M. Tester
user_id = testid
email = tester@ceph.com
api_name = default
access_key = $AK
secret_key = $SK
[s3 alt]
display_name = john.doe
email = john.doe@example.com
user_id = 56789abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234
access_key = $AK
secret_key = $SK
[s3 tenant]
display_name = testx\$tenanteduser
user_id = testx\$9876543210abcdef0123456789abcdef0123456789abcdef0123456789abcdef
access_key = $AK
secret_key = $SK
email = tenanteduser@example.com
tenant = testx
[iam]
email = s3@example.com
user_id = 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
access_key = ABCDEFGHIJKLMNOPQRST
secret_key = abcdefghijklmnopqrstuvwxyzabcdefghijklmn
display_name = youruseridhere
[iam root]
access_key = AAAAAAAAAAAAAAAAAAaa
secret_key = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
user_id = RGW11111111111111111
email = account1@ceph.com
[iam alt root]
access_key = BBBBBBBBBBBBBBBBBBbb
secret_key = bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
user_id = RGW22222222222222222
email = account2@ceph.com
CONF
}

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

mapfile -t TESTS < <(grep -v '^#' "$REPO/benches/s3-tests/subset.txt" | grep . | sed 's#^#s3tests/functional/test_s3.py::#')
printf 'mode\tpassed\tfailed\terrors\tof\tgateway_500\tgateway_501\ttimeouts\tgateway_alive\n' >"$OUT/summary.tsv"
for mode in "${MODES[@]}"; do
    data="$(mktemp -d)"; log="$OUT/$mode.server.log"; : >"$log"
    port="$(free_port)"; gw=""
    case "$mode" in
        dir|soft)
            fabric=none; [ "$mode" = soft ] && fabric=soft
            "$HIPOBJ" serve --listen "127.0.0.1:$port" --root "$data" --fabric "$fabric" \
                --access-key "$AK" --secret-key "$SK" --access-log >/dev/null 2>"$log" &
            gw=$!; PIDS+=("$gw") ;;
        upstream|s3s-fs)
            [ -n "$S3SFS" ] || { echo "s3s-fs not found: run benches/scripts/install-s3s-fs.sh" >&2; exit 1; }
            up="$port"; [ "$mode" = upstream ] && up="$(free_port)"
            "$S3SFS" --host 127.0.0.1 --port "$up" --access-key "$AK" --secret-key "$SK" "$data" \
                >"$OUT/$mode.s3s-fs.log" 2>&1 &
            PIDS+=("$!")
            if [ "$mode" = upstream ]; then
                wait_port "$up"
                "$HIPOBJ" serve --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$up" \
                    --access-key "$AK" --secret-key "$SK" --access-log >/dev/null 2>"$log" &
                gw=$!; PIDS+=("$gw")
            fi ;;
        *) echo "unknown mode $mode" >&2; exit 2 ;;
    esac
    wait_port "$port" || { echo "$mode: server did not start" >&2; cat "$log" >&2; exit 1; }
    write_conf "$port" "$OUT/$mode.conf"
    echo "== $mode on 127.0.0.1:$port (${#TESTS[@]} tests)"
    set +e
    (cd "$S3T" && S3TEST_CONF="$OUT/$mode.conf" "$PYTHON" -m pytest -p no:cacheprovider \
        -o timeout=120 -rfE --junitxml="$OUT/$mode.xml" "$@" "${TESTS[@]}") >"$OUT/$mode.pytest.txt" 2>&1
    set -e
    tail -1 "$OUT/$mode.pytest.txt"
    alive=n/a; five00=n/a; five01=n/a
    if [ -n "$gw" ]; then
        if kill -0 "$gw" 2>/dev/null; then alive=yes; else alive=no; fi
        # Access-log lines end `METHOD /path?query STATUS REQUEST-ID DURATIONms`. 501 is
        # NotImplemented (a feature the server lacks); any other 5xx is a server failure.
        five00="$(grep -cE ' (GET|PUT|POST|DELETE|HEAD|OPTIONS) [^ ]+ 5([1-9][0-9]|0[02-9]) [^ ]+ [0-9.]+ms' "$log" || true)"
        five01="$(grep -cE ' (GET|PUT|POST|DELETE|HEAD|OPTIONS) [^ ]+ 501 [^ ]+ [0-9.]+ms' "$log" || true)"
    fi
    read -r passed failed errors total < <("$PYTHON" - "$OUT/$mode.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
r = ET.parse(sys.argv[1]).getroot()
s = r if r.tag == "testsuite" else r.find("testsuite")
t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
print(t - f - e - k, f, e, t)
PY
)
    # pytest-timeout fails a test that runs past 120 s with "Timeout (0:02:00)!".
    hung="$(grep -c '^E *Failed: Timeout\|+* Timeout +*' "$OUT/$mode.pytest.txt" || true)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$passed" "$failed" "$errors" "$total" "$five00" "$five01" "$hung" "$alive" >>"$OUT/summary.tsv"
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; PIDS=()
    wait 2>/dev/null || true
    rm -rf "$data"
done
echo "== $OUT/summary.tsv"; column -t "$OUT/summary.tsv"
