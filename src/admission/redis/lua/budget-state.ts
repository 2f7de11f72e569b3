/**
 * Budgets and tokens_per_minute in Redis, reserve-then-reconcile (docs/replicas.md):
 * - reserve: the request's estimate is held against the tenant's per-minute bucket and term
 *   budgets, atomically, so racing requests on any replica serialize. A term budget is never
 *   overrun: the estimate must fit in what is left. The bucket follows the in-process rule (a
 *   request is admitted when the bucket covers min(estimate, tokens_per_minute)).
 *   The request bucket (requests_per_minute) is a second bucket on the same hash: a request takes
 *   one whole request from it, and is refused when it holds less; a refusal takes from neither.
 * - close: at the end the hold is settled by actual - estimate (or kept, or refunded whole).
 * Both are idempotent by the gateway's request id (`sluice_request_id`, unique per request; never the
 * client's X-Request-Id): a hold record per request remembers whether it is held, settled or
 * refunded, so a settle is applied once. Every request has its own hold: "dup" (the hold exists)
 * means this request's own reservation is in place already, and it counts as held.
 *
 * Tenant hash: lvl (bucket level), at (ms of lvl), rq (request bucket level), rqat (ms of rq), ps (period start, epoch ms), ut (tokens used),
 * uu (USD used). Hold hash: s (held | settled | refunded), t (tokens), u (USD), ps. The functions
 * need NOW (Redis time, ms) in scope.
 */
export const BUDGET_LUA = `
local function budgetLevel(b, tpm)
  if tpm <= 0 then return nil end
  local lvl, at = tonumber(b[1]), tonumber(b[2])
  if not lvl then return tpm end
  return math.min(tpm, lvl + math.max(0, NOW - at) * tpm / 60000)
end

local function requestLevel(BUD, rpm)
  if not rpm or rpm <= 0 then return nil end
  local r = redis.call('HMGET', BUD, 'rq', 'rqat')
  return budgetLevel(r, rpm)
end

local function budgetReserve(BUD, BREQ, tokens, usd, tpm, btok, busd, period, rpm)
  local s = redis.call('HGET', BREQ, 's')
  if s == 'held' or s == 'settled' then return {'dup'} end
  local b = redis.call('HMGET', BUD, 'lvl', 'at', 'ps', 'ut', 'uu')
  local ps = tonumber(b[3]) or period
  local ut, uu = tonumber(b[4]) or 0, tonumber(b[5]) or 0
  if period > ps then ut, uu, ps = 0, 0, period end
  if btok >= 0 and ut + tokens > btok then return {'tokens', tostring(math.max(0, btok - ut))} end
  if busd >= 0 and uu + usd > busd then return {'usd', tostring(math.max(0, busd - uu))} end
  local lvl = budgetLevel(b, tpm)
  if lvl then
    local need = math.min(tokens, tpm)
    if lvl < need then return {'tpm', tostring(math.max(1, math.ceil((need - lvl) * 60 / tpm)))} end
  end
  local rq = requestLevel(BUD, rpm)
  if rq then
    local one = math.min(1, rpm)
    if rq < one then return {'rpm', tostring(math.max(1, math.ceil((one - rq) * 60 / rpm)))} end
    redis.call('HSET', BUD, 'rq', rq - 1, 'rqat', NOW)
  end
  if lvl then redis.call('HSET', BUD, 'lvl', lvl - tokens, 'at', NOW) end
  redis.call('HSET', BUD, 'ps', ps, 'ut', ut + tokens, 'uu', uu + usd)
  redis.call('HSET', BREQ, 's', 'held', 't', tokens, 'u', usd, 'ps', ps)
  redis.call('PEXPIRE', BREQ, 86400000)
  return {'ok'}
end

-- op: 's' settle by the deltas, 'k' keep the estimate, 'r' refund the whole hold.
local function budgetClose(BUD, BREQ, op, dTokens, dUsd, tpm)
  local h = redis.call('HMGET', BREQ, 's', 't', 'u', 'ps')
  if h[1] ~= 'held' then return 0 end
  if op == 'r' then dTokens, dUsd = -tonumber(h[2]), -tonumber(h[3]) elseif op == 'k' then dTokens, dUsd = 0, 0 end
  redis.call('HSET', BREQ, 's', op == 'r' and 'refunded' or 'settled')
  if dTokens == 0 and dUsd == 0 then return 1 end
  local b = redis.call('HMGET', BUD, 'lvl', 'at', 'ps', 'ut', 'uu')
  local lvl = budgetLevel(b, tpm)
  if lvl then redis.call('HSET', BUD, 'lvl', math.min(tpm, lvl - dTokens), 'at', NOW) end
  if tonumber(b[3]) == tonumber(h[4]) then
    redis.call('HSET', BUD, 'ut', math.max(0, (tonumber(b[4]) or 0) + dTokens), 'uu', math.max(0, (tonumber(b[5]) or 0) + dUsd))
  end
  return 1
end
`;

const STANDALONE_PREAMBLE = `
local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
${BUDGET_LUA}
`;

/**
 * A hold outside an admission script (legacy admission, a preempted request's refund):
 * KEYS bud, breq. ARGV 'reserve' tokens usd tpm btok busd period rpm | 'close' op dTokens dUsd tpm.
 */
export const BUDGET_OP_SCRIPT = `${STANDALONE_PREAMBLE}
if ARGV[1] == 'reserve' then
  return budgetReserve(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]))
end
return budgetClose(KEYS[1], KEYS[2], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
`;

/**
 * Usage served while Redis was away, added on return (local fail mode's reconciliation):
 * KEYS bud; ARGV tokens usd tpm period.
 */
export const BUDGET_ADD_SCRIPT = `${STANDALONE_PREAMBLE}
local b = redis.call('HMGET', KEYS[1], 'lvl', 'at', 'ps', 'ut', 'uu')
local tokens, usd, tpm, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local lvl = budgetLevel(b, tpm)
if lvl then redis.call('HSET', KEYS[1], 'lvl', lvl - tokens, 'at', NOW) end
local ps = tonumber(b[3]) or period
local ut, uu = tonumber(b[4]) or 0, tonumber(b[5]) or 0
if period > ps then ut, uu, ps = 0, 0, period end
if period == ps then redis.call('HSET', KEYS[1], 'ps', ps, 'ut', ut + tokens, 'uu', uu + usd) end
return 1
`;

/**
 * What is left for each tenant (status, metrics, rate-limit headers): KEYS the tenants' budget
 * hashes; ARGV per tenant tpm period rpm. Returns per tenant: bucket level (-1 without a bucket),
 * tokens used, USD used, request bucket level (-1 without one).
 */
export const BUDGET_PEEK_SCRIPT = `${STANDALONE_PREAMBLE}
local out = {}
for i, key in ipairs(KEYS) do
  local tpm, period, rpm = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local b = redis.call('HMGET', key, 'lvl', 'at', 'ps', 'ut', 'uu')
  local lvl = budgetLevel(b, tpm)
  local used, usd = tonumber(b[4]) or 0, tonumber(b[5]) or 0
  if (tonumber(b[3]) or period) < period then used, usd = 0, 0 end
  out[#out + 1] = tostring(lvl or -1)
  out[#out + 1] = tostring(used)
  out[#out + 1] = tostring(usd)
  out[#out + 1] = tostring(requestLevel(key, rpm) or -1)
end
return out
`;
