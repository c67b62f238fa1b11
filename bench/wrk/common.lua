-- Shared by orders-new.lua and orders-replay.lua (loaded with dofile; path from env WRK_DIR).
-- PORTS="38100,38101": wrk threads are assigned round-robin to those ports on 127.0.0.1 (use -t equal
-- to a multiple of the port count), like the peer harness. Counts statuses per thread and prints one
-- machine-readable RESULT line at the end (CONNS: the -c given, for Little's law's mean).
threads = {}

function setup(thread)
  local n = #threads + 1
  thread:set("tid", n)
  local ports = os.getenv("PORTS")
  if ports and ports ~= "" then
    local list = {}
    for p in string.gmatch(ports, "%d+") do list[#list + 1] = p end
    thread.addr = wrk.lookup("127.0.0.1", list[((n - 1) % #list) + 1])[1]
  end
  threads[n] = thread
end

function count(status, headers)
  if status == 201 then c201 = c201 + 1
  elseif status >= 200 and status < 300 then c2xx = c2xx + 1
  elseif status == 409 then c409 = c409 + 1
  elseif status == 422 then c422 = c422 + 1
  elseif status == 503 then c503 = c503 + 1
  else cother = cother + 1 end
  -- idemkey's replay header, and axum-idempotent's (bench/layer-peer.sh)
  if headers["idempotent-replayed"] == "true" or headers["Idempotent-Replayed"] == "true"
    or headers["idempotency-replayed"] == "true" then
    creplayed = creplayed + 1
  end
end

-- Seeds math.random from /dev/urandom and the thread's number, so no two threads or runs draw
-- the same keys.
function seed_random()
  local f = io.open("/dev/urandom", "rb")
  local s = f:read(6); f:close()
  local seed = 0
  for i = 1, #s do seed = seed * 256 + s:byte(i) end
  math.randomseed(seed + (tid or 0))
  for _ = 1, 10 do math.random() end
end

function reset_counts()
  c201, c2xx, c409, c422, c503, cother, creplayed = 0, 0, 0, 0, 0, 0, 0
end

function done(summary, latency, requests)
  local t = { c201 = 0, c2xx = 0, c409 = 0, c422 = 0, c503 = 0, cother = 0, creplayed = 0 }
  for _, th in ipairs(threads) do
    for k in pairs(t) do t[k] = t[k] + (th:get(k) or 0) end
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_s=%.2f rps=%.1f p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f " ..
    "s201=%d s2xx=%d s409=%d s422=%d s503=%d sother=%d replayed=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_timeout=%d mean_ms=%.3f little_ms=%.3f p999_ms=%.2f\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000, t.c201, t.c2xx, t.c409, t.c422, t.c503, t.cother, t.creplayed,
    e.connect, e.read, e.write, e.timeout, latency.mean / 1000,
    -- Little's law: the mean latency a closed loop of CONNS connections must show at this rate
    1000 * (tonumber(os.getenv("CONNS") or "0") or 0) / math.max(summary.requests / (summary.duration / 1e6), 1e-9),
    latency:percentile(99.9) / 1000))
end
