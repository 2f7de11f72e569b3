/**
 * The Lua every admission script starts with: one pool's keys, the class settings, the counters,
 * the reservation rule, leases, tickets, shared fair tags and the dispatcher. Each script is this
 * preamble plus its own body, run atomically by Redis (one round trip per decision).
 *
 * The rules are the core's (src/core/slots.ts, src/core/engine.ts), written again in Lua because
 * Redis runs them: headroom(c) = capacity - total - sum over classes h above c of
 * max(0, reserved_h - inflight_h); reservation = max(floor, ceil(per_slot * capacity)), clamped to
 * the live capacity highest class first (taken at `rat`, the fleet's size under an adaptive limit,
 * and scaled by cap / rat, rounded down); starvation pass first (reservations ignored, capacity
 * binding), then strict priority; no queue jumping.
 *
 * KEYS 1 is the pool's `st` key; the pool's other keys share its prefix (`<pool prefix>st` ->
 * `<pool prefix>leases`, ...) and its hash tag, so the script derives them instead of taking 25
 * names on every call (the names were most of a call's bytes and of the client's encoding time):
 *   st (hash: epoch cap rat pin t i0..i3 seq q0..q3)   capd (hash replica -> reported capacity)
 *   capr (hash replica -> reported size the reservations are sized at, under an adaptive limit)
 *   leases (zset id -> expiry ms)            lmeta (hash id -> rank|replica|units|weight|seq|tenant)
 *   claims (hash victim lease -> preemptor ticket)
 *   rl (hash replica -> leases held)         replicas (zset replica -> heartbeat expiry ms)
 *   rinfo (hash replica -> info)             pre0..3 (zset lease -> admission seq)
 *   q0..3 (zset ticket -> fair tag)          qa0..3 (zset ticket -> enqueue ms)
 *   tmeta (hash ticket -> rank|req|replica|units|weight|enq|tag|tenant)
 *   vt0..3 (hash tenant -> last fair tag; field "~floor" = the class's virtual time)
 *   KEYS 2 bud, 3 breq: the tenant's budget and the request's hold (admit, release and cancel only)
 * ARGV 1 the pool's settings, one JSON array built once per backend: lease ms, replica TTL ms,
 *   then per class (rank 0..3) the floors, the per-slot fractions, the starvation thresholds in ms
 *   and whether it may preempt (four arrays), the pool's name (URI-encoded), the channel prefix,
 *   then per class the starvation_max_share and the wait target in ms after which a queued waiter
 *   of a can_preempt class claims a victim (0: it preempts on arrival only). st also keeps each class's promotion credit
 *   (pc0..pc3) as of the admission seq pa0..pa3 (engine.ts: bounded starvation promotion).
 *   A script's own arguments start at 2.
 */

export const POOL_STATE_LUA = `
local ST = KEYS[1]
local P = string.sub(ST, 1, -3)
local CAPD, CAPR, LEASES, LMETA, CLAIMS, RL, REPLICAS, RINFO = P .. 'capd', P .. 'capr', P .. 'leases', P .. 'lmeta', P .. 'claims', P .. 'rl', P .. 'replicas', P .. 'rinfo'
local PRE = {[0] = P .. 'pre0', P .. 'pre1', P .. 'pre2', P .. 'pre3'}
local Q = {[0] = P .. 'q0', P .. 'q1', P .. 'q2', P .. 'q3'}
local QA = {[0] = P .. 'qa0', P .. 'qa1', P .. 'qa2', P .. 'qa3'}
local TMETA = P .. 'tmeta'
local VT = {[0] = P .. 'vt0', P .. 'vt1', P .. 'vt2', P .. 'vt3'}
-- cjson.decode is one C call: parsing the settings in Lua cost more than the rest of the preamble.
local SET = cjson.decode(ARGV[1])
local LEASE_MS, REPLICA_TTL = SET[1], SET[2]
-- Per class, indexed by rank + 1 (Lua arrays start at 1).
local FLOOR, PER, STARVE, CANP = SET[3], SET[4], SET[5], SET[6]
local POOL, CHAN = SET[7], SET[8]
local SHARE, PAFTER = SET[9], SET[10]
local A = 1
local PIN_CHANGED = false

local clock = redis.call('TIME')
local NOW = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local st = redis.call('HMGET', ST, 'cap', 't', 'i0', 'i1', 'i2', 'i3', 'seq', 'epoch', 'q0', 'q1', 'q2', 'q3', 'rat')
local cap = tonumber(st[1])
local rat = tonumber(st[13])
local total = tonumber(st[2]) or 0
local inf = {[0] = tonumber(st[3]) or 0, tonumber(st[4]) or 0, tonumber(st[5]) or 0, tonumber(st[6]) or 0}
local seq = tonumber(st[7]) or 0
local epoch = st[8]
-- Tickets per class queue, kept with the counters as tickets come and go (the dispatcher's fast
-- exit); a pool saved before they were kept counts its queues once.
local QN
if st[9] then
  QN = {[0] = tonumber(st[9]), tonumber(st[10]), tonumber(st[11]), tonumber(st[12])}
else
  QN = {[0] = redis.call('ZCARD', Q[0]), redis.call('ZCARD', Q[1]), redis.call('ZCARD', Q[2]), redis.call('ZCARD', Q[3])}
end

local function save()
  redis.call('HSET', ST, 't', total, 'i0', inf[0], 'i1', inf[1], 'i2', inf[2], 'i3', inf[3], 'seq', seq,
    'q0', QN[0], 'q1', QN[1], 'q2', QN[2], 'q3', QN[3])
end

local function split(s, n)
  local out, pos = {}, 1
  for i = 1, n - 1 do
    local j = string.find(s, '|', pos, true)
    out[i] = string.sub(s, pos, j - 1)
    pos = j + 1
  end
  out[n] = string.sub(s, pos)
  return out
end

-- Reservations at the live capacity, highest class first (a dip is absorbed by the lowest); under
-- an adaptive limit taken at the fleet's size (rat) and scaled by cap / rat, rounded down.
local RES = {[0] = 0, 0, 0, 0}
local function reserve()
  local c = cap or 0
  local at = math.max(c, rat or c)
  local remaining = at
  for r = 3, 0, -1 do
    local want = math.max(FLOOR[r + 1], math.ceil(PER[r + 1] * at))
    local got = math.min(want, math.max(0, remaining))
    remaining = remaining - got
    if at > c then got = math.floor(got * c / at) end
    RES[r] = got
  end
end
reserve()

local function headroom(r)
  local held = 0
  for h = r + 1, 3 do
    local unused = RES[h] - inf[h]
    if unused > 0 then held = held + unused end
  end
  return (cap or 0) - total - held
end

-- A class is preemptible while some higher class may preempt.
local function preemptible(r)
  for h = r + 1, 3 do if CANP[h + 1] then return true end end
  return false
end

local function publish(replica, message)
  redis.call('PUBLISH', CHAN .. replica, message)
end

-- Shared fair tags (self-clocked fair queuing over the tenants' shared service counters).
local function vfloor(r) return tonumber(redis.call('HGET', VT[r], '~floor')) or 0 end
local function lastTag(r, tenant) return tonumber(redis.call('HGET', VT[r], tenant)) or 0 end
local function moveTag(r, tenant, delta)
  if delta ~= 0 then redis.call('HINCRBYFLOAT', VT[r], tenant, delta) end
end

local function addLease(id, rank, replica, units, weight, tenant)
  seq = seq + 1
  redis.call('ZADD', LEASES, NOW + LEASE_MS, id)
  redis.call('HSET', LMETA, id, rank .. '|' .. replica .. '|' .. units .. '|' .. weight .. '|' .. seq .. '|' .. tenant)
  if preemptible(rank) then redis.call('ZADD', PRE[rank], seq, id) end
  redis.call('HINCRBY', RL, replica, 1)
  inf[rank] = inf[rank] + 1
  total = total + 1
end

-- Removes a lease (release, expiry, preemption); nil when it is not held (fencing: a lease that
-- was reaped or preempted can never be freed twice).
local function dropLease(id)
  if redis.call('ZREM', LEASES, id) == 0 then return nil end
  local raw = redis.call('HGET', LMETA, id)
  redis.call('HDEL', LMETA, id)
  local m = split(raw, 6)
  local lease = {rank = tonumber(m[1]), replica = m[2], units = tonumber(m[3]), weight = tonumber(m[4]), tenant = m[6]}
  redis.call('ZREM', PRE[lease.rank], id)
  if redis.call('HINCRBY', RL, lease.replica, -1) <= 0 then redis.call('HDEL', RL, lease.replica) end
  inf[lease.rank] = inf[lease.rank] - 1
  total = total - 1
  return lease
end

local function ticketOf(id)
  local raw = redis.call('HGET', TMETA, id)
  if not raw then return nil end
  local m = split(raw, 8)
  return {rank = tonumber(m[1]), req = tonumber(m[2]), replica = m[3], units = tonumber(m[4]), weight = tonumber(m[5]),
    enq = tonumber(m[6]), tag = tonumber(m[7]), tenant = m[8]}
end

local function forgetTicket(id, t)
  redis.call('HDEL', TMETA, id)
  if redis.call('ZREM', Q[t.rank], id) == 1 then QN[t.rank] = QN[t.rank] - 1 end
  redis.call('ZREM', QA[t.rank], id)
end

-- Grants a waiting ticket: it becomes a lease of the same id, and its replica hears at once.
local function grant(id, t, how)
  forgetTicket(id, t)
  addLease(id, t.rank, t.replica, t.units, t.weight, t.tenant)
  publish(t.replica, 'g|' .. POOL .. '|' .. id .. '|' .. how)
end

local function waitersAbove(r)
  for h = r + 1, 3 do if QN[h] > 0 then return true end end
  return false
end

-- A class's promotion credit now: it grows by its share per admission (seq), up to one promotion;
-- a class with a share starts with one in hand.
local function promotionCredit(r)
  local c = redis.call('HMGET', ST, 'pc' .. r, 'pa' .. r)
  local credit = tonumber(c[1])
  if not credit then credit = SHARE[r + 1] > 0 and 1 or 0 end
  credit = credit + SHARE[r + 1] * (seq - (tonumber(c[2]) or 0))
  if credit > 1 then return 1 end
  return credit
end

-- The starvation pass: the class whose oldest waiter is the oldest past its mark takes a free slot
-- for its fair-order head, capacity binding. A promotion that passes a waiting higher class spends
-- a whole credit (at most starvation_max_share of admissions).
local function promoteStarving()
  while total < cap do
    local best, bestAt, bestRank = nil, nil, nil
    for r = 0, 3 do
      local oldest = QN[r] > 0 and redis.call('ZRANGE', QA[r], 0, 0, 'WITHSCORES') or {}
      if oldest[1] then
        local at = tonumber(oldest[2])
        if NOW - at >= STARVE[r + 1] and (not best or at < bestAt)
          and (not waitersAbove(r) or promotionCredit(r) >= 1) then
          best, bestAt, bestRank = oldest[1], at, r
        end
      end
    end
    if not best then return end
    if waitersAbove(bestRank) then
      redis.call('HSET', ST, 'pc' .. bestRank, promotionCredit(bestRank) - 1, 'pa' .. bestRank, seq)
    end
    -- The mark picks the class; its fair order picks the ticket, and the class floor moves, as in
    -- the strict pass (engine.ts: promoting the oldest ticket made the class run oldest-first).
    local top = redis.call('ZRANGE', Q[bestRank], 0, 0)[1]
    local t = ticketOf(top)
    local start = t.tag - t.units
    if start > vfloor(bestRank) then redis.call('HSET', VT[bestRank], '~floor', start) end
    grant(top, t, 'promoted')
  end
end

-- Strict priority with reservation-aware headroom; true if any ticket was granted.
local function serveByPriority()
  local any = false
  for r = 3, 0, -1 do
    while QN[r] > 0 do
      local top = redis.call('ZRANGE', Q[r], 0, 0)
      if not top[1] then break end
      if headroom(r) <= 0 then return any end
      local t = ticketOf(top[1])
      local start = t.tag - t.units
      if start > vfloor(r) then redis.call('HSET', VT[r], '~floor', start) end
      grant(top[1], t, 'queued')
      any = true
    end
  end
  return any
end

-- Admits whatever the rules allow now: starvation pass, then strict priority with headroom; again
-- while serving the higher classes left a free slot a starving waiter may now take uncredited.
local function dispatch()
  if not cap then return end
  while QN[0] + QN[1] + QN[2] + QN[3] > 0 do
    promoteStarving()
    if not serveByPriority() or total >= cap then return end
  end
end

-- A freed lease's slot goes to the preemptor that claimed it, if one waits for it.
local function passClaim(id)
  local claimant = redis.call('HGET', CLAIMS, id)
  if not claimant then return end
  redis.call('HDEL', CLAIMS, id)
  local t = ticketOf(claimant)
  if not t or t.tag >= 0 then return end
  local start = math.max(vfloor(t.rank), lastTag(t.rank, t.tenant))
  redis.call('HSET', VT[t.rank], t.tenant, start + t.units)
  if total < (cap or 0) then
    t.tag = start + t.units
    grant(claimant, t, 'preempted')
  else
    -- No slot after all (capacity fell meanwhile): the preemptor queues like any arrival.
    t.tag = start + t.units
    redis.call('HSET', TMETA, claimant, t.rank .. '|' .. t.req .. '|' .. t.replica .. '|' .. t.units .. '|' .. t.weight .. '|' .. t.enq .. '|' .. t.tag .. '|' .. t.tenant)
    redis.call('ZADD', Q[t.rank], t.tag, claimant)
    redis.call('ZADD', QA[t.rank], t.enq, claimant)
    QN[t.rank] = QN[t.rank] + 1
  end
end

-- Leases whose replica stopped renewing them: their slots come back.
local function reapLeases()
  local expired = redis.call('ZRANGEBYSCORE', LEASES, '-inf', NOW, 'LIMIT', 0, 256)
  for _, id in ipairs(expired) do
    if dropLease(id) then passClaim(id) end
  end
  return #expired
end

-- Replicas whose heartbeat stopped: their waiting tickets and capacity reports go.
local function reapReplicas()
  local dead = redis.call('ZRANGEBYSCORE', REPLICAS, '-inf', NOW, 'LIMIT', 0, 16)
  if #dead == 0 then return false end
  local gone = {}
  for _, replica in ipairs(dead) do
    gone[replica] = true
    redis.call('ZREM', REPLICAS, replica)
    redis.call('HDEL', CAPD, replica)
    redis.call('HDEL', CAPR, replica)
    redis.call('HDEL', RINFO, replica)
  end
  local all = redis.call('HGETALL', TMETA)
  for i = 1, #all, 2 do
    local t = ticketOf(all[i])
    if gone[t.replica] then
      forgetTicket(all[i], t)
      -- A claim made for a dead preemptor lapses; the victim keeps its slot.
    end
  end
  local claims = redis.call('HGETALL', CLAIMS)
  for i = 1, #claims, 2 do
    if redis.call('HEXISTS', TMETA, claims[i + 1]) == 0 then redis.call('HDEL', CLAIMS, claims[i]) end
  end
  return true
end

-- The capacity in force: the pin, else the largest capacity a live replica reports.
local function agreeCapacity()
  local pin = tonumber(redis.call('HGET', ST, 'pin'))
  local agreed = pin
  if not agreed then
    local reports = redis.call('HVALS', CAPD)
    for _, v in ipairs(reports) do
      local n = tonumber(v)
      if not agreed or n > agreed then agreed = n end
    end
  end
  -- Under adaptive limits, the reservations are sized at the largest fleet size a replica
  -- reports (a pin is the fleet's size itself).
  local at = nil
  if agreed and not pin then
    for _, v in ipairs(redis.call('HVALS', CAPR)) do
      local n = tonumber(v)
      if n > agreed and (not at or n > at) then at = n end
    end
  end
  if at ~= rat then
    rat = at
    if rat then redis.call('HSET', ST, 'rat', rat) else redis.call('HDEL', ST, 'rat') end
    reserve()
  end
  if agreed and (agreed ~= cap or PIN_CHANGED) then
    cap = agreed
    redis.call('HSET', ST, 'cap', cap)
    reserve()
    redis.call('PUBLISH', CHAN .. '*', 'c|' .. POOL .. '|' .. cap .. '|' .. (pin or -1))
    return true
  end
  return false
end

-- Besides the counts: the replicas' excess over their local share (capacity / N) and the
-- headroom below it, so that a replica going local when Redis stops holds back its part of the
-- others' excess (local-share.ts).
local function snapshot()
  local n = redis.call('ZCARD', REPLICAS)
  local excess, headroom = 0, 0
  if cap and n > 0 then
    local share = math.floor(cap / n)
    local held = redis.call('HVALS', RL)
    for _, v in ipairs(held) do
      local l = tonumber(v)
      if l > share then excess = excess + l - share else headroom = headroom + share - l end
    end
    if n > #held then headroom = headroom + (n - #held) * share end
  end
  return {cap or -1, total, inf[0], inf[1], inf[2], inf[3],
    QN[0], QN[1], QN[2], QN[3], n, excess, headroom, rat or -1}
end
`;
