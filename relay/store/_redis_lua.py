"""The Lua scripts of ``RedisStore`` (see ``relay.store._redis`` for the key layout).

Each runs atomically on Redis in one round trip. Numbers cross as decimal
strings; Lua prints numbers with 14 significant digits, so serials must stay
below 10**14.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, get_args

from transport.frames import RunStatus

__all__ = ["INDEXED", "SCRIPTS", "SHA", "STATUSES", "evalsha"]

STATUSES: tuple[str, ...] = get_args(RunStatus)
"""Run statuses in the order the scripts number them (1-based) and the status index keys."""
INDEXED: tuple[str, ...] = STATUSES[: STATUSES.index("complete")]
"""The statuses with an index set: those a Run leaves (``queued`` to ``suspended``). A Run
written with a later (terminal) status is taken out of every index set and stays out."""

_COMMON = (
    f"local PENDING = {STATUSES.index('pending') + 1}\n"
    f"local ACTIVE = {STATUSES.index('active') + 1}\n"
    + """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function splice(data, serial)
  if data == '{}' then return '{"serial":' .. serial .. '}' end
  return '{"serial":' .. serial .. ',' .. string.sub(data, 2)
end
local function touch(ttl)
  if ttl ~= '0' then
    for k = 1, 5 do redis.call('PEXPIRE', KEYS[k], ttl) end
  end
end
-- True if ``pattern`` (``*`` matches any run of characters, nothing else is special)
-- matches the whole of ``s``: relay.auth.matches, on bytes (a UTF-8 literal found in UTF-8
-- text starts and ends on characters).
local function matches(pattern, s)
  local parts, from = {}, 1
  while true do
    local star = string.find(pattern, '*', from, true)
    if not star then break end
    parts[#parts + 1] = string.sub(pattern, from, star - 1)
    from = star + 1
  end
  if #parts == 0 then return pattern == s end
  local first, last = parts[1], string.sub(pattern, from)
  if #s < #first + #last then return false end
  if string.sub(s, 1, #first) ~= first then return false end
  if string.sub(s, #s - #last + 1) ~= last then return false end
  local pos, stop = #first + 1, #s - #last
  for k = 2, #parts do
    local part = parts[k]
    if #part > 0 then
      local at = string.find(s, part, pos, true)
      if not at or at + #part - 1 > stop then return false end
      pos = at + #part
    end
  end
  return true
end
-- Where an agent may act, from the presence (``<prefix>presence``, client id -> deadline:
-- every session) and, beside it, ``<prefix>scoped`` (``[client id, [pattern, ...]]`` ->
-- deadline: the sessions those patterns match) with each client id's members of it in
-- ``<prefix>scopes:<client id>``. Deadlines past ``since`` (ms) count. Returns true (every
-- session) or the patterns (none: nowhere).
local function acts_in(presence, owner, since)
  local deadline = redis.call('ZSCORE', presence, owner)
  if deadline and tonumber(deadline) > since then return true end
  local prefix = string.sub(presence, 1, #presence - #'presence')
  local scoped = prefix .. 'scoped'
  local patterns = {}
  for _, member in ipairs(redis.call('SMEMBERS', prefix .. 'scopes:' .. owner)) do
    deadline = redis.call('ZSCORE', scoped, member)
    if deadline and tonumber(deadline) > since then
      for _, pattern in ipairs(cjson.decode(member)[2]) do patterns[#patterns + 1] = pattern end
    end
  end
  return patterns
end
local function covers(where, session)
  if where == true then return true end
  for _, pattern in ipairs(where) do
    if matches(pattern, session) then return true end
  end
  return false
end
-- Puts the Run (meta hash, run id, index member, session) in the set ``owns`` of
-- ``owner``, out of the one it was in (meta ``o:<run id>``), and an owner no node has
-- marked present in that session yet in the presence set as of now (so the sweep looks
-- at it once the grace has passed). True if it moved.
local function own(meta, run_id, member, session, owner, owns, presence)
  local field = 'o:' .. run_id
  local was = redis.call('HGET', meta, field)
  if was == owns then return false end
  if was then redis.call('SREM', was, member) end
  redis.call('SADD', owns, member)
  redis.call('HSET', meta, field, owns)
  local now = now_ms()
  if not covers(acts_in(presence, owner, now), session) then
    redis.call('ZADD', presence, 'NX', now, owner)
  end
  return true
end
local function write_runs(start, session)
  for i = start, #ARGV, 7 do
    if redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 2]) == 1 then
      redis.call('RPUSH', KEYS[5], ARGV[i])
    end
    local status = tonumber(ARGV[i + 1])
    local at = 5 + status
    for k = 6, #KEYS - 1 do
      if k == at then
        redis.call('SADD', KEYS[k], ARGV[i + 3])
      else
        redis.call('SREM', KEYS[k], ARGV[i + 3])
      end
    end
    local field = 'd:' .. ARGV[i]
    local queued = redis.call('HGET', KEYS[1], field)
    if status == PENDING then
      if not queued then
        local id = redis.call('XADD', ARGV[i + 4], '*', 's', session, 'r', ARGV[i])
        redis.call('HSET', KEYS[1], field, id)
      end
    elseif queued then
      redis.call('XDEL', ARGV[i + 4], queued)
      redis.call('HDEL', KEYS[1], field)
    end
    if status == ACTIVE and ARGV[i + 5] ~= '' then
      own(KEYS[1], ARGV[i], ARGV[i + 3], session, ARGV[i + 5], ARGV[i + 6], KEYS[#KEYS])
    else
      field = 'o:' .. ARGV[i]
      local owns = redis.call('HGET', KEYS[1], field)
      if owns then
        redis.call('SREM', owns, ARGV[i + 3])
        redis.call('HDEL', KEYS[1], field)
      end
    end
  end
end
"""
)

# KEYS: meta, log, ids, runs, order, then (only with Run records or a gone agent) one
#       status set per INDEXED and the agents' presence (sorted set: client id ->
#       deadline, ms).
# ARGV: epoch, entry id, data, expect_last or '', max_history, dedup_window,
#       ttl ms or '0', publish command, pub/sub channel, session id, a gone agent's
#       client id or '', its grace ms, then per Run record:
#       run id, status number (1-based), record, index member, its agent's dispatch stream,
#       its owner or '', the owner's set of active Runs (``<prefix>owns:<owner>``).
# A record written pending that is not on its agent's stream yet is added to it
# (``XADD``; meta field ``d:<run id>`` keeps the stream entry's id); one written
# with another status is taken off (``XDEL``). So a stored prompt's Run is on the
# stream the moment the prompt is, and no entry outlives its Run's ``pending``.
# Likewise a Run written active with an owner is in that owner's set (meta field
# ``o:<run id>`` names the set) and in no other, and the owner is in the presence
# set (``NX``: with the deadline "now" if no node has written it yet); a Run written
# with any other status is in no owner's set. With a gone agent (an end for its absence,
# by the AGENT_LOST sweep) it stores nothing unless that agent's deadline passed its
# grace ago, the sweep's own test: not if a node marked it present since (it came back
# through any node) nor if its absence was restarted (``_ABSENT_FROM_NOW``).
# Returns {0, epoch now or ''} | {1, serial, data} (repeat) | {2, last} | {3, serial}
# (stored: the caller splices the serial into its data as this script does) | {4} (the
# gone agent is not gone).
_APPEND = (
    _COMMON
    + """
local head = redis.call('HMGET', KEYS[1], 'e', 's')
local epoch = head[1]
if epoch ~= ARGV[1] then return {0, epoch or ''} end
local known = redis.call('ZSCORE', KEYS[3], ARGV[2])
if known then
  local found = redis.call('XRANGE', KEYS[2], known .. '-0', known .. '-0')
  if found[1] then return {1, tonumber(known), found[1][2][2]} end
  return {1, tonumber(known), splice(ARGV[3], known)}
end
local last = tonumber(head[2] or '0')
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= last then return {2, last} end
if ARGV[11] ~= '' then
  local since = now_ms() - tonumber(ARGV[12])
  if covers(acts_in(KEYS[#KEYS], ARGV[11], since), ARGV[10]) then return {4} end
end
local serial = last + 1
local stored = splice(ARGV[3], serial)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], serial .. '-0', 'd', stored)
redis.call('HSET', KEYS[1], 's', serial)
redis.call('ZADD', KEYS[3], serial, ARGV[2])
local window = tonumber(ARGV[6])
if serial > window then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', serial - window)
end
write_runs(13, ARGV[10])
touch(ARGV[7])
redis.call(ARGV[8], ARGV[9], epoch .. ' ' .. stored)
return {3, serial}
"""
)

# KEYS: meta, log, ids, runs, order. ARGV: a new epoch, ttl ms or '0'.
# Returns {epoch, last, first}. Writes only for a new session: a Redis out of memory
# refuses a write command (HSETNX too) even when it would change nothing, and a session
# that exists must still load then (reads go on).
_OPEN = (
    _COMMON
    + """
if redis.call('HEXISTS', KEYS[1], 'e') == 0 then
  redis.call('HSET', KEYS[1], 'e', ARGV[1], 's', 0)
  redis.call('DEL', KEYS[2], KEYS[3])
end
touch(ARGV[2])
local head = redis.call('HMGET', KEYS[1], 'e', 's')
local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
local first = 0
if oldest[1] then first = tonumber(string.match(oldest[1][1], '^%d+')) end
return {head[1], tonumber(head[2]), first}
"""
)

# KEYS: ids, log. ARGV: entry id. Returns {serial, data} or nil.
_FIND = """
local known = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not known then return false end
local found = redis.call('XRANGE', KEYS[2], known .. '-0', known .. '-0')
if not found[1] then return false end
return {tonumber(known), found[1][2][2]}
"""

# KEYS: meta, log. ARGV: after, count. Returns {epoch or nil, id, data, id, data, ...}.
_SINCE = """
local out = {redis.call('HGET', KEYS[1], 'e')}
local entries = redis.call('XRANGE', KEYS[2], (tonumber(ARGV[1]) + 1) .. '-0', '+',
  'COUNT', ARGV[2])
for _, e in ipairs(entries) do
  out[#out + 1] = e[1]
  out[#out + 1] = e[2][2]
end
return out
"""

# KEYS: meta, an agent's dispatch stream. ARGV: run id, the stream entry a node holds,
# session id, the consumer group. Moves the Run to a new entry at the stream's end if it
# still waits on the held one (meta ``d:<run id>``, as _APPEND keeps it); acknowledges
# and deletes the held entry either way. Returns the new entry's id, or false.
_REQUEUE = """
local field = 'd:' .. ARGV[1]
redis.call('XACK', KEYS[2], ARGV[4], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
if redis.call('HGET', KEYS[1], field) ~= ARGV[2] then return false end
local id = redis.call('XADD', KEYS[2], '*', 's', ARGV[3], 'r', ARGV[1])
redis.call('HSET', KEYS[1], field, id)
return id
"""

# Agent presence and the AGENT_LOST sweep. Deadlines are Redis's clock (``TIME``), so
# the nodes' clocks need not agree. An agent is present per client id in every session
# (``presence``) or in the sessions of some patterns (``scoped``: see acts_in).
# KEYS: presence, scoped. ARGV: ttl ms, how many client ids present everywhere, those
# client ids, then per agent present in some sessions only: its client id, its member of
# ``scoped`` (``[client id, [pattern, ...]]``). Each present until now + ttl; a member of
# ``scoped`` is also put in its client id's set (``<prefix>scopes:<client id>``).
_PRESENT = (
    _COMMON
    + """
local deadline = now_ms() + tonumber(ARGV[1])
local everywhere = 2 + tonumber(ARGV[2])
local args = {}
for i = 3, everywhere do
  args[#args + 1] = deadline
  args[#args + 1] = ARGV[i]
end
if #args > 0 then redis.call('ZADD', KEYS[1], unpack(args)) end
local marked = #args / 2
args = {}
local scopes = string.sub(KEYS[1], 1, #KEYS[1] - #'presence') .. 'scopes:'
for i = everywhere + 1, #ARGV, 2 do
  args[#args + 1] = deadline
  args[#args + 1] = ARGV[i + 1]
  redis.call('SADD', scopes .. ARGV[i], ARGV[i + 1])
end
if #args > 0 then redis.call('ZADD', KEYS[2], unpack(args)) end
return marked + #args / 2
"""
)

# KEYS: presence, scoped. ARGV: grace ms, owners' set prefix (``<prefix>owns:``), the
# store's prefix, at most how many owners. Owners with a deadline (everywhere, or in some
# sessions) that passed ``grace`` ago: the Runs each still owns in sessions where no
# deadline of it has not (checked against meta ``o:<run id>``: a member the Run no longer
# backs, or of a session that expired, is dropped), as {owner, {member, ...}, {lost
# member, ...}, ...}: the lost are those of its members whose Run record the session's
# ``runs`` hash no longer holds (Redis evicted or lost it; the caller drops them with
# _FORGET_LOST once the hub had its try); of an owner with none, what passed is forgotten
# (taken out of the presence sets); of an owner returned, what passed moves to ``now -
# grace``, behind every owner already gone, so a sweep that returns an owner whose Runs'
# ends keep failing does not return it first for ever (the ``limit`` oldest would starve
# the rest).
_GONE = (
    _COMMON
    + """
local since = now_ms() - tonumber(ARGV[1])
local limit = tonumber(ARGV[4])
local owners, seen = {}, {}
local function lapsed(owner)
  if not seen[owner] then
    seen[owner] = true
    owners[#owners + 1] = owner
  end
end
for _, owner in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', since, 'LIMIT', 0, limit)) do
  lapsed(owner)
end
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', since, 'LIMIT', 0, limit)) do
  lapsed(cjson.decode(member)[1])
end
local out = {}
for _, owner in ipairs(owners) do
  local owns = ARGV[2] .. owner
  local where = acts_in(KEYS[1], owner, since)
  local runs, lost = {}, {}
  for _, member in ipairs(redis.call('SMEMBERS', owns)) do
    local ids = cjson.decode(member)
    local base = ARGV[3] .. '{' .. ids[1] .. '}:'
    if redis.call('HGET', base .. 'meta', 'o:' .. ids[2]) ~= owns then
      redis.call('SREM', owns, member)
    elseif not covers(where, ids[1]) then
      runs[#runs + 1] = member
      if redis.call('HEXISTS', base .. 'runs', ids[2]) == 0 then lost[#lost + 1] = member end
    end
  end
  if #runs == 0 then
    local deadline = redis.call('ZSCORE', KEYS[1], owner)
    if deadline and tonumber(deadline) <= since then redis.call('ZREM', KEYS[1], owner) end
    local scopes = ARGV[3] .. 'scopes:' .. owner
    for _, member in ipairs(redis.call('SMEMBERS', scopes)) do
      deadline = redis.call('ZSCORE', KEYS[2], member)
      if not deadline or tonumber(deadline) <= since then
        redis.call('ZREM', KEYS[2], member)
        redis.call('SREM', scopes, member)
      end
    end
  else
    out[#out + 1] = owner
    out[#out + 1] = runs
    out[#out + 1] = lost
    -- To the back of the queue: its lapsed deadlines become ``since`` (still gone, so
    -- its Runs' ends are stored), and the next pass starts with the owners behind it,
    -- should these ends fail every time.
    local deadline = redis.call('ZSCORE', KEYS[1], owner)
    if deadline and tonumber(deadline) < since then
      redis.call('ZADD', KEYS[1], 'XX', since, owner)
    end
    for _, member in ipairs(redis.call('SMEMBERS', ARGV[3] .. 'scopes:' .. owner)) do
      deadline = redis.call('ZSCORE', KEYS[2], member)
      if deadline and tonumber(deadline) < since then
        redis.call('ZADD', KEYS[2], 'XX', since, member)
      end
    end
  end
end
return out
"""
)

# KEYS: none. ARGV: owners' set prefix (``<prefix>owns:``), the store's prefix, then per
# Run: its owner, its index member. Drops from the owner's set each Run it still owns (meta
# ``o:<run id>`` names that set) whose record is not in its session's ``runs`` hash
# (Redis evicted or lost it: the hub finds no such Run, so the sweep would return it for
# ever), with its meta field, so the append script puts it in a set again should it be
# written active again. A Run whose record is there is left alone, whatever became of
# its end. Returns {owner, member, ...} of those dropped.
_FORGET_LOST = """
local out = {}
for i = 3, #ARGV, 2 do
  local owns = ARGV[1] .. ARGV[i]
  local ids = cjson.decode(ARGV[i + 1])
  local base = ARGV[2] .. '{' .. ids[1] .. '}:'
  local field = 'o:' .. ids[2]
  if redis.call('HGET', base .. 'meta', field) == owns
    and redis.call('HEXISTS', base .. 'runs', ids[2]) == 0
  then
    redis.call('SREM', owns, ARGV[i + 1])
    redis.call('HDEL', base .. 'meta', field)
    out[#out + 1] = ARGV[i]
    out[#out + 1] = ARGV[i + 1]
  end
end
return out
"""

# KEYS: presence, scoped. Deadlines already passed become now: absence counts from now (a
# sweeper that has just taken over, or is back after losing Redis). Returns how many moved.
_ABSENT_FROM_NOW = (
    _COMMON
    + """
local now = now_ms()
local moved = 0
for _, key in ipairs(KEYS) do
  local lapsed = redis.call('ZRANGEBYSCORE', key, '-inf', now)
  for _, member in ipairs(lapsed) do redis.call('ZADD', key, now, member) end
  moved = moved + #lapsed
end
return moved
"""
)

# KEYS: presence. ARGV: owners' set prefix, the store's prefix, then index members of
# Runs found active. Puts each Run that is still active with an owner in its owner's
# set, as the append script would have (for Runs an earlier version wrote). Returns
# how many it added.
_OWN = (
    _COMMON
    + """
local added = 0
for i = 3, #ARGV do
  local ids = cjson.decode(ARGV[i])
  local base = ARGV[2] .. '{' .. ids[1] .. '}:'
  local raw = redis.call('HGET', base .. 'runs', ids[2])
  if raw then
    local record = cjson.decode(raw)
    if record.status == 'active' and type(record.owner) == 'string'
      and own(base .. 'meta', ids[2], ARGV[i], ids[1], record.owner, ARGV[1] .. record.owner,
        KEYS[1])
    then
      added = added + 1
    end
  end
end
return added
"""
)

# KEYS: runs, order. ARGV: the length ``order`` had when read, then run ids. Writes
# ``order`` anew as those run ids (``RedisStore.runs`` found records it did not name: Redis
# lost it, or part of it), expiring with ``runs``, unless its length changed since it was
# read (a Run made meanwhile was pushed on it; a later read mends it). Returns 1 if it
# did, 0 if not.
_MEND_ORDER = """
if redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2])
for i = 2, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
"""

SCRIPTS = {name: text.encode() for name, text in [
    ("append", _APPEND), ("open", _OPEN), ("find", _FIND),
    ("since", _SINCE), ("requeue", _REQUEUE), ("present", _PRESENT), ("gone", _GONE),
    ("own", _OWN), ("absent_from_now", _ABSENT_FROM_NOW), ("forget_lost", _FORGET_LOST),
    ("mend_order", _MEND_ORDER),
]}  # fmt: skip
SHA = {name: hashlib.sha1(text).hexdigest() for name, text in SCRIPTS.items()}


def evalsha(name: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
    """The ``EVALSHA`` command that runs script ``name`` on ``keys`` with ``args``."""
    return ("EVALSHA", SHA[name], len(keys), *keys, *args)
