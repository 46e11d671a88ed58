#!/usr/bin/env bash
# The README's "Distributed search" followed on one machine, on the simulator: a throwaway
# PostgreSQL server on loopback, two "hosts" (each its own cache directory, one running
# --devices 0,1) on one study, progress with `tuner list` and optuna-dashboard's API.
# Run from a clone with .venv installed by `pip install -e ".[cuda,postgres]"`:
#   bash bench/distributed_loopback.sh > bench/results/distributed_loopback.txt 2>&1
set -u
WORK=${WORK:-/tmp/tuner-loopback}
PORT=${PORT:-5433}
URL=postgresql://tuner@127.0.0.1:$PORT/tuner
SEARCH=(.venv/bin/tuner search --backend cuda --simulate --shape 16 16 16 --trials 12 --storage "$URL")
# PostgreSQL refuses to run as root: as root, its programs run as the postgres user, as the README says.
AS_PG=()
[ "$(id -u)" = 0 ] && AS_PG=(runuser -u postgres --)

run() { echo "\$ $*"; "$@"; echo "[exit $?]"; }

echo "# commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, no GPU (simulator)"
echo "# versions: $(.venv/bin/python -c 'import importlib.metadata as m; print(";".join(f"{p} {m.version(p)}" for p in ("numba", "numba-cuda", "optuna", "psycopg")))')"
rm -rf "$WORK" /tmp/tuner-db && mkdir -p "$WORK"

echo "## 1. a PostgreSQL server on loopback, and a database"
PG=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
run "${AS_PG[@]}" "$PG/initdb" -D /tmp/tuner-db -U tuner --auth=trust
run "${AS_PG[@]}" "$PG/pg_ctl" -D /tmp/tuner-db -l /tmp/tuner-db/log \
    -o "-p $PORT -k /tmp -c listen_addresses=127.0.0.1" -w start
run createdb -h 127.0.0.1 -p "$PORT" -U tuner tuner

echo "## 2. the same command on every host: host A with two (simulated) GPUs, host B with one"
echo "\$ ${SEARCH[*]} --cache-dir $WORK/hostA --devices 0,1 &"
"${SEARCH[@]}" --cache-dir "$WORK/hostA" --devices 0,1 > "$WORK/hostA.log" 2>&1 &
A=$!
echo "\$ ${SEARCH[*]} --cache-dir $WORK/hostB &"
TQDM_DISABLE=1 "${SEARCH[@]}" --cache-dir "$WORK/hostB" > "$WORK/hostB.log" 2>&1 &
B=$!

echo "## 3. progress, while they run"
until ls "$WORK"/hostB/records/*/*.json > /dev/null 2>&1 || ! kill -0 $B 2> /dev/null; do sleep 1; done
run .venv/bin/tuner list --cache-dir "$WORK/hostB"
wait $A; echo "[host A exit $?]"
wait $B; echo "[host B exit $?]"
echo "--- host A's output"; cat "$WORK/hostA.log"
echo "--- host B's output"; cat "$WORK/hostB.log"
echo "## 3. progress, after: each host's record names the same winner"
run .venv/bin/tuner list --cache-dir "$WORK/hostA"
run .venv/bin/tuner list --cache-dir "$WORK/hostB"
run .venv/bin/tuner search "${SEARCH[@]:2}" --cache-dir "$WORK/hostB"   # a rerun: the budget is spent

echo "## 3. optuna-dashboard on the same storage"
run .venv/bin/pip install -q optuna-dashboard 2>&1 | grep -v "is ignored"
echo "\$ .venv/bin/optuna-dashboard $URL --host 127.0.0.1 --port 8080 &"
.venv/bin/optuna-dashboard "$URL" --host 127.0.0.1 --port 8080 > "$WORK/dashboard.log" 2>&1 &
D=$!
for _ in $(seq 60); do curl -sf http://127.0.0.1:8080/api/studies > /dev/null && break; sleep 1; done
echo "\$ curl -s http://127.0.0.1:8080/api/studies; curl -s http://127.0.0.1:8080/api/studies/ID   (summarised)"
ID=$(curl -s http://127.0.0.1:8080/api/studies | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["study_summaries"][0]["study_id"])')
curl -s "http://127.0.0.1:8080/api/studies/$ID" | .venv/bin/python -c '
import collections, json, sys
study = json.load(sys.stdin)
print(study["name"], "trials:", len(study["trials"]), dict(collections.Counter(t.get("state") for t in study["trials"])))
print("best trial:", [(t.get("number"), t.get("values")) for t in study["best_trials"]])
print("user attributes shown per trial:", sorted({a["key"] for t in study["trials"] for a in t.get("user_attrs", [])}))'
kill $D

echo "## the study, read with Optuna: kinds of trials, workers, pinning, duplicates"
.venv/bin/python - "$URL" <<'EOF'
import collections, json, sys
import optuna
storage = optuna.storages.RDBStorage(sys.argv[1])
[name] = optuna.get_all_study_names(storage)
trials = optuna.load_study(study_name=name, storage=storage).trials
measured = [t for t in trials if t.user_attrs.get("kind") == "measured"]
print("states:", dict(collections.Counter(t.state.name for t in trials)))
print("kinds:", dict(collections.Counter(t.user_attrs.get("kind") for t in trials)))
print("measured by worker:", dict(collections.Counter(
    (t.user_attrs["worker"].partition(":")[2], t.user_attrs.get("pinned", "-")) for t in measured)))
print("measured:", len(measured), "distinct configurations:", len({json.dumps(t.params, sort_keys=True) for t in measured}))
EOF

echo "## stop the server"
run "${AS_PG[@]}" "$PG/pg_ctl" -D /tmp/tuner-db -m fast -w stop
