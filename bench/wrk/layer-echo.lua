-- wrk: POST /echo on `idemkey-server fixture` (the tower Layer in lease mode), every request a
-- fresh Idempotency-Key: one claim and one completion per request. Env: WRK_DIR (this folder);
-- COOKIE (optional, sent as the Cookie header: axum-idempotent stores only for a session, see
-- bench/layer-peer.sh).
dofile(os.getenv("WRK_DIR") .. "/common.lua")

local headers = { ["Content-Type"] = "application/json" }
local cookie = os.getenv("COOKIE")
if cookie and cookie ~= "" then headers["Cookie"] = cookie end
local r = math.random

function init(args)
  reset_counts()
  math.randomseed(os.time() * 1000 + tid)
end

function request()
  headers["Idempotency-Key"] = string.format('"%08x-%04x-4%03x-%04x-%012x"',
    r(0, 0xffffffff), r(0, 0xffff), r(0, 0xfff), r(0x8000, 0xbfff), r(0, 0xffffffffffff))
  return wrk.format("POST", "/echo", headers, '{"amount":500}')
end

function response(status, hdrs, body)
  count(status, hdrs)
end
