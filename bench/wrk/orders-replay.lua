-- wrk: POST /orders (idemkey-server) where every request REPLAYS one completed key (env KEY=<uuid>),
-- same body as the original, so every answer is the stored 201 + Idempotent-Replayed: true.
-- Env: TOKEN, KEY, PORTS, WRK_DIR; API=lab for the article's Node lab (/pedidos, no auth).
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local lab = os.getenv("API") == "lab"
wrk.method = "POST"
wrk.path = lab and "/pedidos" or "/orders"
wrk.body = lab and '{"sku":"LIBRO-TS","cantidad":2}' or '{"sku":"LIBRO-TS","quantity":2}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Idempotency-Key"] = '"' .. assert(os.getenv("KEY"), "set KEY=<uuid>") .. '"'
if not lab then wrk.headers["Authorization"] = "Bearer " .. assert(os.getenv("TOKEN"), "set TOKEN") end

function init(args) reset_counts() end

function response(status, headers, b) count(status, headers) end
