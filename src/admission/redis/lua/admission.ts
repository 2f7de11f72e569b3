/**
 * The admission scripts: each is the pool-state preamble plus one decision, run atomically.
 *
 *   admit     reserve the budget hold, then a slot at once (fast), a preemption claim, or a ticket
 *             in the class queue (the dispatcher may grant it in the same call)
 *   release   give a lease back (fencing: only a lease still held frees a slot), correct the
 *             tenant's fair tag by the actual cost, settle the budget hold, wake the next waiter
 *   cancel    a waiter leaves (timeout, client gone): its ticket goes, or its lease if the grant
 *             crossed the cancel; its budget hold is refunded
 *   transfer  a victim's replica confirms a preemption before the first byte: the slot passes
 *   refuse    the victim already had its first byte: the preemptor tries another victim or queues
 *
 * Messages published to a replica's channel (wakeups.ts): `g|pool|id|how` (a ticket granted:
 * queued, promoted or preempted), `p|pool|lease|rank` (preempt this lease for a higher class),
 * and on the fleet channel `c|pool|capacity|pin` (the agreed capacity or the pin moved).
 */
import { BUDGET_LUA } from "./budget-state.js";
import { POOL_STATE_LUA } from "./pool-state.js";

const TICKETS_LUA = `
local function encodeTicket(t)
  return t.rank .. '|' .. t.req .. '|' .. t.replica .. '|' .. t.units .. '|' .. t.weight .. '|' .. t.enq .. '|' .. t.tag .. '|' .. t.tenant
end

-- Queues a ticket behind its tenant's earlier work (its fair tag) and in arrival order.
local function enqueue(id, t)
  local start = math.max(vfloor(t.rank), lastTag(t.rank, t.tenant))
  t.tag = start + t.units
  redis.call('HSET', VT[t.rank], t.tenant, t.tag)
  redis.call('HSET', TMETA, id, encodeTicket(t))
  redis.call('ZADD', Q[t.rank], t.tag, id)
  redis.call('ZADD', QA[t.rank], t.enq, id)
  QN[t.rank] = QN[t.rank] + 1
end

-- Claims the newest lease of the lowest class below the ticket's that has no first byte yet, and
-- asks its replica to preempt it. The ticket waits outside the queues (tag -1) for the answer.
local function claimVictim(id, t)
  for r = 0, t.rank - 1 do
    local victim = redis.call('ZRANGE', PRE[r], -1, -1)[1]
    if victim then
      redis.call('ZREM', PRE[r], victim)
      redis.call('HSET', CLAIMS, victim, id)
      t.tag = -1
      redis.call('HSET', TMETA, id, encodeTicket(t))
      local owner = split(redis.call('HGET', LMETA, victim), 6)[2]
      publish(owner, 'p|' .. POOL .. '|' .. victim .. '|' .. t.rank)
      return true
    end
  end
  return false
end
`;

/**
 * Queued waiters of the highest waiting class that reached their wait target (preempt_after_secs)
 * with no slot freed claim victims, oldest first, while victims last (engine.ts: preemptOverdue).
 * A claimant leaves its queue (its fair tag comes back: the slot's passing charges it again).
 */
const OVERDUE_LUA = `
local function preemptOverdue()
  for r = 3, 0, -1 do
    if QN[r] > 0 then
      if not CANP[r + 1] or PAFTER[r + 1] <= 0 then return end
      while QN[r] > 0 and headroom(r) <= 0 do
        local oldest = redis.call('ZRANGE', QA[r], 0, 0, 'WITHSCORES')
        if not oldest[1] or NOW - tonumber(oldest[2]) < PAFTER[r + 1] then return end
        local victims = false
        for v = 0, r - 1 do
          if redis.call('ZCARD', PRE[v]) > 0 then victims = true break end
        end
        if not victims then return end
        local id = oldest[1]
        local t = ticketOf(id)
        forgetTicket(id, t)
        local last = lastTag(t.rank, t.tenant)
        if math.abs(last - t.tag) <= 1e-9 * math.max(1, math.abs(t.tag)) then moveTag(t.rank, t.tenant, -t.units) end
        claimVictim(id, t)
      end
      return
    end
  end
end
`;

const PREAMBLE = `${POOL_STATE_LUA}\n${BUDGET_LUA}\n${TICKETS_LUA}\n${OVERDUE_LUA}`;

function withSnapshot(head: string): string {
  return `local out = ${head}\nfor _, v in ipairs(snapshot()) do out[#out + 1] = v end\nreturn out`;
}

/**
 * ARGV A+1 id, +2 rank, +3 requested rank, +4 units (cost / weight), +5 weight, +6 replica,
 * +7 queue room (1/0), +8 tenant, +9 budget (1/0), +10 tokens, +11 USD, +12 tpm (-1 none),
 * +13 budget tokens (-1), +14 budget USD (-1), +15 period start, +16 rpm (-1 none).
 * Returns {status, held (1/0), detail, snapshot...}; status fast | granted | queued | claim |
 * full | budget (detail: tokens | usd | tpm | rpm, then the amount left or Retry-After) | init.
 */
export const ADMIT_SCRIPT = `${PREAMBLE}
if not cap then return {'init'} end
reapLeases()
local id, rank, req = ARGV[A + 1], tonumber(ARGV[A + 2]), tonumber(ARGV[A + 3])
local t = {rank = rank, req = req, units = tonumber(ARGV[A + 4]), weight = tonumber(ARGV[A + 5]),
  replica = ARGV[A + 6], enq = NOW, tag = 0, tenant = ARGV[A + 8]}
local room = ARGV[A + 7] == '1'
local held = '0'
if ARGV[A + 9] == '1' then
  local verdict = budgetReserve(KEYS[2], KEYS[3], tonumber(ARGV[A + 10]), tonumber(ARGV[A + 11]),
    tonumber(ARGV[A + 12]), tonumber(ARGV[A + 13]), tonumber(ARGV[A + 14]), tonumber(ARGV[A + 15]),
    tonumber(ARGV[A + 16]))
  -- 'dup': this request's own hold (the id is the gateway's, unique) is in place: it is held.
  if verdict[1] == 'ok' or verdict[1] == 'dup' then held = '1'
  else
    save()
    ${withSnapshot("{'budget', '0', verdict[1] .. '|' .. verdict[2]}")}
  end
end

local ahead = false
for r = rank, 3 do
  if QN[r] > 0 then ahead = true break end
end
if not ahead and headroom(rank) > 0 then
  local tags = redis.call('HMGET', VT[rank], '~floor', t.tenant)
  local fl = tonumber(tags[1]) or 0
  local start = math.max(fl, tonumber(tags[2]) or 0)
  redis.call('HSET', VT[rank], t.tenant, start + t.units)
  if start > fl then redis.call('HSET', VT[rank], '~floor', start) end
  addLease(id, rank, t.replica, t.units, t.weight, t.tenant)
  save()
  ${withSnapshot("{'fast', held, ''}")}
end
if not ahead and CANP[rank + 1] and PAFTER[rank + 1] <= 0 and claimVictim(id, t) then
  save()
  ${withSnapshot("{'claim', held, ''}")}
end
if not room then
  if held == '1' then budgetClose(KEYS[2], KEYS[3], 'r', 0, 0, tonumber(ARGV[A + 12])) end
  save()
  ${withSnapshot("{'full', '0', ''}")}
end
enqueue(id, t)
dispatch()
preemptOverdue()
save()
local status = redis.call('ZSCORE', LEASES, id) and 'granted' or 'queued'
${withSnapshot("{status, held, ''}")}
`;

/**
 * ARGV A+1 lease id, +2 actual units (-1: none reported), +3 budget op (- none, s settle, k keep,
 * r refund), +4 token delta, +5 USD delta, +6 tpm. Returns {released (1/0), snapshot...}.
 */
export const RELEASE_SCRIPT = `${PREAMBLE}
reapLeases()
local id = ARGV[A + 1]
local lease = dropLease(id)
if lease then
  local actual = tonumber(ARGV[A + 2])
  if actual >= 0 then moveTag(lease.rank, lease.tenant, actual - lease.units) end
  passClaim(id)
  dispatch()
end
if ARGV[A + 3] ~= '-' then
  budgetClose(KEYS[2], KEYS[3], ARGV[A + 3], tonumber(ARGV[A + 4]), tonumber(ARGV[A + 5]), tonumber(ARGV[A + 6]))
end
save()
${withSnapshot("{lease and 1 or 0}")}
`;

/**
 * ARGV A+1 ticket id, +2 budget op (- or r), +3 tpm. Returns {cancelled | released | gone, snapshot...}.
 */
export const CANCEL_SCRIPT = `${PREAMBLE}
reapLeases()
local id = ARGV[A + 1]
local result = 'gone'
local t = ticketOf(id)
if t then
  forgetTicket(id, t)
  if t.tag >= 0 then
    -- Unserved work charges nothing: take the tag back when it is still the tenant's last.
    local last = lastTag(t.rank, t.tenant)
    if math.abs(last - t.tag) <= 1e-9 * math.max(1, math.abs(t.tag)) then moveTag(t.rank, t.tenant, -t.units) end
  else
    local claims = redis.call('HGETALL', CLAIMS)
    for i = 1, #claims, 2 do
      if claims[i + 1] == id then
        redis.call('HDEL', CLAIMS, claims[i])
        -- The victim is still preemptible by someone else.
        local raw = redis.call('HGET', LMETA, claims[i])
        if raw then
          local m = split(raw, 6)
          redis.call('ZADD', PRE[tonumber(m[1])], tonumber(m[5]), claims[i])
        end
      end
    end
  end
  result = 'cancelled'
else
  local lease = dropLease(id)
  if lease then
    moveTag(lease.rank, lease.tenant, -lease.units)
    passClaim(id)
    dispatch()
    result = 'released'
  end
end
if ARGV[A + 2] ~= '-' then budgetClose(KEYS[2], KEYS[3], 'r', 0, 0, tonumber(ARGV[A + 3])) end
save()
${withSnapshot("{result}")}
`;

/** ARGV A+1 victim lease. Returns {transferred (1/0), snapshot...}. */
export const TRANSFER_SCRIPT = `${PREAMBLE}
reapLeases()
local victim = ARGV[A + 1]
local lease = dropLease(victim)
if lease then
  -- Preempted before its first byte: nothing was served, its fair charge comes back.
  moveTag(lease.rank, lease.tenant, -lease.units)
  passClaim(victim)
  dispatch()
end
save()
${withSnapshot("{lease and 1 or 0}")}
`;

/** ARGV A+1 victim lease (it had its first byte). Returns {snapshot...}. */
export const REFUSE_SCRIPT = `${PREAMBLE}
reapLeases()
local victim = ARGV[A + 1]
local claimant = redis.call('HGET', CLAIMS, victim)
redis.call('HDEL', CLAIMS, victim)
if claimant then
  local t = ticketOf(claimant)
  if t and t.tag < 0 and not claimVictim(claimant, t) then
    enqueue(claimant, t)
    dispatch()
  end
end
save()
${withSnapshot("{}")}
`;

export const PREAMBLE_FOR_MEMBERSHIP = PREAMBLE;
