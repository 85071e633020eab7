# Sourced by the benchmark scripts that run `hipobj serve --fabric soft` as a process of its own
# over one object (benches/gateway_cpu_per_op.sh, benches/gpu/soft_thread_sample.sh).
#
#   start_soft_gateway BIN DIR OBJECT_MIB [PREFIX...]
#
# starts `BIN serve` (behind PREFIX, e.g. `taskset -c 8-15`) on a free loopback port with its
# root and log under DIR, waits until it listens, and puts OBJECT_MIB MiB of random bytes as
# s3://bench/o. Sets PORT, EP and SPID, and exports the bench credentials; the caller's EXIT
# trap kills $SPID.
start_soft_gateway() {
    local bin=$1 dir=$2 mib=$3
    shift 3
    export AWS_ACCESS_KEY_ID=hipobjbench AWS_SECRET_ACCESS_KEY=hipobjbenchsecret AWS_REGION=us-east-1
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    EP=http://127.0.0.1:$PORT
    "$@" "$bin" serve --listen "127.0.0.1:$PORT" --root "$dir/root" --fabric soft > "$dir/server.log" 2>&1 &
    SPID=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
    head -c $((mib << 20)) /dev/urandom > "$dir/obj"
    "$bin" mb --endpoint-url "$EP" s3://bench > /dev/null
    "$bin" put --endpoint-url "$EP" --no-progress "$dir/obj" s3://bench/o > /dev/null
    rm -f "$dir/obj"
}
