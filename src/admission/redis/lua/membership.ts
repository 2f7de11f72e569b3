/**
 * The scripts that keep a replica in the fleet: the heartbeat (registry, capacity report, lease
 * renewal, reaping of expired leases and dead replicas), the rejoin after Redis came back or after
 * the replica was presumed dead (adopt), and the fleet-wide capacity pin.
 */
import { PREAMBLE_FOR_MEMBERSHIP as PREAMBLE } from "./admission.js";

/**
 * ARGV A+1 replica, +2 info (host|pid|started ms), +3 capacity report (-1: none), +4 epoch to
 * set when the pool has none (a fresh Redis), +5 n, then n lease ids to renew, then m, then m
 * lease ids that had their first byte (no longer preemptible), then the size the reservations
 * are sized at (an adaptive limit's fleet size; -1: the capacity itself).
 * Returns {epoch, fresh (1/0), was alive (1/0), pin (-1 none), {lost ids}, {replica, expiry,
 * info, leases, ...}, next lease expiry (-1 none), snapshot...}.
 */
export const HEARTBEAT_SCRIPT = `${PREAMBLE}
local replica = ARGV[A + 1]
local fresh = 0
if not epoch then
  epoch = ARGV[A + 4]
  redis.call('HSET', ST, 'epoch', epoch)
  fresh = 1
end
local known = tonumber(redis.call('ZSCORE', REPLICAS, replica))
local wasAlive = (known and known > NOW) and 1 or 0
redis.call('ZADD', REPLICAS, NOW + REPLICA_TTL, replica)
redis.call('HSET', RINFO, replica, ARGV[A + 2] .. '|' .. NOW)
local report = tonumber(ARGV[A + 3])
if report >= 0 then redis.call('HSET', CAPD, replica, report) end

local lost = {}
local i = A + 6
for _ = 1, tonumber(ARGV[A + 5]) do
  local id = ARGV[i]
  i = i + 1
  if redis.call('ZSCORE', LEASES, id) then redis.call('ZADD', LEASES, NOW + LEASE_MS, id) else lost[#lost + 1] = id end
end
local marked = tonumber(ARGV[i])
i = i + 1
for _ = 1, marked do
  local raw = redis.call('HGET', LMETA, ARGV[i])
  if raw then redis.call('ZREM', PRE[tonumber(split(raw, 6)[1])], ARGV[i]) end
  i = i + 1
end
local reportAt = tonumber(ARGV[i]) or -1
if report >= 0 then
  if reportAt > report then redis.call('HSET', CAPR, replica, reportAt) else redis.call('HDEL', CAPR, replica) end
end

reapLeases()
reapReplicas()
agreeCapacity()
dispatch()
preemptOverdue()
save()

-- Bounded idle state: fair tags at or below their class's floor carry nothing.
for r = 0, 3 do
  if redis.call('HLEN', VT[r]) > 4096 then
    local fl = vfloor(r)
    local all = redis.call('HGETALL', VT[r])
    for j = 1, #all, 2 do
      if all[j] ~= '~floor' and tonumber(all[j + 1]) <= fl then redis.call('HDEL', VT[r], all[j]) end
    end
  end
end

local replicas = {}
local live = redis.call('ZRANGE', REPLICAS, 0, -1, 'WITHSCORES')
for j = 1, #live, 2 do
  replicas[#replicas + 1] = live[j]
  replicas[#replicas + 1] = live[j + 1]
  replicas[#replicas + 1] = redis.call('HGET', RINFO, live[j]) or ''
  replicas[#replicas + 1] = redis.call('HGET', RL, live[j]) or '0'
end
local nextLease = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')[2] or '-1'
local pin = redis.call('HGET', ST, 'pin') or '-1'
local out = {epoch, fresh, wasAlive, pin, lost, replicas, nextLease}
for _, v in ipairs(snapshot()) do out[#out + 1] = v end
return out
`;

/**
 * Rejoin: the replica's running requests become leases again (counted whatever the headroom:
 * they run), and its waiters' tickets are queued again. ARGV A+1 replica, +2 n, then n x (id,
 * rank, units, weight, tenant), then m, then m x (id, rank, requested rank, units, weight, tenant).
 */
export const ADOPT_SCRIPT = `${PREAMBLE}
local replica = ARGV[A + 1]
local i = A + 3
for _ = 1, tonumber(ARGV[A + 2]) do
  local id, rank, units, weight, tenant = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), ARGV[i + 4]
  i = i + 5
  if redis.call('ZSCORE', LEASES, id) then redis.call('ZADD', LEASES, NOW + LEASE_MS, id)
  else addLease(id, rank, replica, units, weight, tenant) end
end
local tickets = tonumber(ARGV[i])
i = i + 1
for _ = 1, tickets do
  local id = ARGV[i]
  local t = {rank = tonumber(ARGV[i + 1]), req = tonumber(ARGV[i + 2]), units = tonumber(ARGV[i + 3]),
    weight = tonumber(ARGV[i + 4]), tenant = ARGV[i + 5], replica = replica, enq = NOW, tag = 0}
  i = i + 6
  if redis.call('HEXISTS', TMETA, id) == 0 and not redis.call('ZSCORE', LEASES, id) then enqueue(id, t) end
end
reapLeases()
dispatch()
save()
return snapshot()
`;

/** ARGV A+1 pin (-1: unpin). Returns {pin (-1 none), snapshot...}. */
export const PIN_SCRIPT = `${PREAMBLE}
local pin = tonumber(ARGV[A + 1])
if pin < 0 then redis.call('HDEL', ST, 'pin') else redis.call('HSET', ST, 'pin', pin) end
PIN_CHANGED = true
reapLeases()
agreeCapacity()
dispatch()
save()
local out = {redis.call('HGET', ST, 'pin') or '-1'}
for _, v in ipairs(snapshot()) do out[#out + 1] = v end
return out
`;
