-- An ack over several tenants joins its queue's mailbox of such acks committed together
-- (logic/ack_gathering.py), its leases already checked and marked (lease_check.lua, one
-- call per pair): the entry is built by the caller, with each id's tenant.
-- | the committer lock  | answer                   | after                                 |
-- | free                | commit, the entries      | the lock taken (its value the         |
-- |                     | taken                    | request), the entries taken           |
-- | the request's (a    | commit                   | unchanged                             |
-- | call sent again)    |                          |                                       |
-- | another's           | wait                     | the entry in line                     |
-- "entries": the acks waiting in line, at most ARGV[4], oldest first; "entry": this ack's,
-- '<request> <ids> <attempts> <tenants>' (each comma separated, a tenant per id).
-- KEYS: 1 mailbox (list), 2 lock (string), 3 states (hash)
-- ARGV: 1 request, 2 entry, 3 lock_ms, 4 most entries taken
-- Returns {role, entry...}.

-- include: ack_mailbox (the mailbox's join: lua/ack_mailbox.lua)

return ack_join(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], tonumber(ARGV[3]),
                tonumber(ARGV[4]))
