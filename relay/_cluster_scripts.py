"""The Redis scripts of ``relay._cluster``: the sweeper's lease and the pruning of streams.

Each runs atomically on Redis, so what it looks at and what it changes cannot be split
by another node's command. docs/explanation/relay-internals.md says how the sweep uses them.
"""

from __future__ import annotations

__all__ = ["LEAD", "PRUNE"]

# KEYS: the lease. ARGV: this node's id, the lease in ms. 1 if this node holds it now.
# 2 if it has just taken it (it was free). Renewed with SET, not PEXPIRE: a Redis out of
# memory refuses SET, so a sweeper that cannot write presence cannot keep sweeping either.
LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""

# KEYS: an agent's stream. ARGV: the consumer group, idle ms. Drops the group's consumers
# that hold nothing and have been idle that long (nodes that are gone: a live reader is
# never idle for more than its blocking read), atomically with looking, so a consumer
# that takes an entry meanwhile is kept. Then, if the stream holds no entry and no group
# of it holds one (pending) or has a consumer left (a node reads it: a worker serves the
# name), deletes the stream with its groups: every agent name ever used (by a worker, or
# named by a prompt) no longer keeps a stream and a group for ever. In the same step as
# looking: a Run stored after it (XADD) makes the stream again, and a node makes the group
# again from its start (``id="0"``) before it reads, so no Run is lost. Returns {consumers
# dropped, 1 if the stream went or 0}.
PRUNE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local function fields(reply)
  local f = {}
  for i = 1, #reply, 2 do f[reply[i]] = reply[i + 1] end
  return f
end
local dropped = 0
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if ok then
  for _, consumer in ipairs(consumers) do
    local f = fields(consumer)
    if f['pending'] == 0 and f['idle'] >= tonumber(ARGV[2]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
      dropped = dropped + 1
    end
  end
end
if redis.call('XLEN', KEYS[1]) ~= 0 then return {dropped, 0} end
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = fields(group)
  if f['pending'] ~= 0 or f['consumers'] ~= 0 then return {dropped, 0} end
end
redis.call('DEL', KEYS[1])
return {dropped, 1}
"""
