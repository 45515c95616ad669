//! The token vault's rows in Redis, shared by every replica. Keys, all under `mcp-host:vault:`
//! (a principal, upstream or issuer inside a key name has its `%` and `:` percent-encoded):
//!
//! | key | type | what |
//! |---|---|---|
//! | `cred:{upstream}:{principal}` | hash `principal`, `upstream`, `identity`, `issuer`, `scopes`, `sealed`, `v`, `expires`, `refresh_after`, `last_used`, `updated` | a credential: its sealed tokens and plaintext metadata; written by a compare-and-set script on `v` |
//! | `creds:principal:{principal}` | set of upstreams | a principal's credentials (the per-user bound, `revoke --user`) |
//! | `creds` | set `{upstream}:{principal}` | every credential (`vault list`, `rotate`) |
//! | `refresh` | sorted set `{upstream}:{principal}` → refresh due (ms) | what the refresher takes next |
//! | `client:{upstream}:{issuer}` | hash `upstream`, `issuer`, `identity`, `client_id`, `method`, `sealed_secret`, `registered` | a registered client |
//! | `clients:{upstream}` | sorted set issuer → registered (ms) | an upstream's clients (the oldest beyond the bound go) |
//! | `clients` | set of upstreams | the upstreams with clients |
//! | `flow:{state hash}` | string: the flow row's JSON (metadata and sealed part), `PX` its time to live | a pending flow, taken with `GETDEL` (once) |
//! | `flowid:{flow id}` | string: the state hash, `PX` the same | the connect page's way to a flow |
//! | `flows:principal:{principal}` / `flows` | sorted set flow id → expiry (ms) | pending flows per principal and in total (the bounds) |
//! | `lease:{upstream}:{principal}` | string: the holder, `SET NX PX` | the refresh lease; released by a compare-and-delete script |
//!
//! Every read-modify-write is one Lua script (plain Redis, not Cluster: the scripts touch keys they
//! compute, as the task scripts do).

use std::collections::HashMap;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Script, cmd};

use crate::access::upstream::vault::{
    ClientRow, CredentialRow, Expect, FlowInsert, FlowRow, PutOutcome, RowFilter, VaultBounds,
};
use crate::store::StoreError;
use crate::store::redis::{PREFIX, timed};

/// `text` as a part of a key name: `%` and `:` percent-encoded (so `{a}:{b}` splits one way).
fn part(text: &str) -> String {
    text.replace('%', "%25").replace(':', "%3A")
}

/// The text of a key part ([`part`] undone).
fn unpart(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at..at + 3);
        match code {
            Some("%25") => out.push('%'),
            Some("%3A") => out.push(':'),
            _ => {
                out.push('%');
                rest = &rest[at + 1..];
                continue;
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    out
}

/// `{upstream}:{principal}`, the member naming a credential in the indexes.
fn member(principal: &str, upstream: &str) -> String {
    format!("{}:{}", part(upstream), part(principal))
}

fn key(rest: &str) -> String {
    format!("{PREFIX}vault:{rest}")
}

/// The Lua twin of [`part`].
const PART: &str = r"
local function part(s)
  return (string.gsub(s, '[%%:]', function(c) if c == '%' then return '%25' else return '%3A' end end))
end
";

/// KEYS: the credential, the principal's set, every credential, the refresh schedule. ARGV: mode
/// (`absent`, `version`, `any`), expected version, max per principal, member, principal,
/// upstream, identity, issuer, scopes, sealed, expires, refresh after (`''`: none), last used,
/// updated. `{1, version}` stored, `{0, found or -1}` not as expected, `{2, held}` full.
const PUT_CREDENTIAL: &str = r"
local v = redis.call('HGET', KEYS[1], 'v')
if ARGV[1] == 'absent' and v then return {0, tonumber(v)} end
if ARGV[1] == 'version' and v ~= ARGV[2] then return {0, tonumber(v or '-1')} end
if not v then
  local held = redis.call('SCARD', KEYS[2])
  if held >= tonumber(ARGV[3]) then return {2, held} end
end
local nv = tonumber(v or '0') + 1
redis.call('HSET', KEYS[1], 'principal', ARGV[5], 'upstream', ARGV[6], 'identity', ARGV[7],
  'issuer', ARGV[8], 'scopes', ARGV[9], 'sealed', ARGV[10], 'v', nv, 'expires', ARGV[11],
  'refresh_after', ARGV[12], 'updated', ARGV[14])
if not v then redis.call('HSET', KEYS[1], 'last_used', ARGV[13]) end
if ARGV[12] == '' then redis.call('ZREM', KEYS[4], ARGV[4])
else redis.call('ZADD', KEYS[4], ARGV[12], ARGV[4]) end
redis.call('SADD', KEYS[2], ARGV[6])
redis.call('SADD', KEYS[3], ARGV[4])
return {1, nv}
";

/// KEYS: the credential, the principal's set, every credential, the refresh schedule. ARGV:
/// upstream, member. 1 when it existed.
const DELETE_CREDENTIAL: &str = r"
local existed = redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
return existed
";

/// KEYS: the credential. ARGV: now. Moves `last_used` forward, if the row exists.
const TOUCH_CREDENTIAL: &str = r"
local last = redis.call('HGET', KEYS[1], 'last_used')
if last and tonumber(ARGV[1]) > tonumber(last) then
  redis.call('HSET', KEYS[1], 'last_used', ARGV[1])
end
return 1
";

/// KEYS: the client, the upstream's clients, the upstreams with clients. ARGV: upstream, issuer,
/// identity, client id, method, sealed secret (`''`: none), registered, max per upstream, the
/// prefix of this upstream's client keys. Runs after [`PART`].
const PUT_CLIENT: &str = r"
redis.call('HSET', KEYS[1], 'upstream', ARGV[1], 'issuer', ARGV[2], 'identity', ARGV[3],
  'client_id', ARGV[4], 'method', ARGV[5], 'sealed_secret', ARGV[6], 'registered', ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[7], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
local max = tonumber(ARGV[8])
for _, issuer in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('ZCARD', KEYS[2]) <= max then break end
  if issuer ~= ARGV[2] then
    redis.call('DEL', ARGV[9] .. part(issuer))
    redis.call('ZREM', KEYS[2], issuer)
  end
end
return 1
";

/// KEYS: the client. ARGV: old sealed secret, new. 1 when replaced.
const RESEAL_CLIENT: &str = r"
if redis.call('HGET', KEYS[1], 'sealed_secret') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'sealed_secret', ARGV[2])
return 1
";

/// KEYS: the upstream's clients, the upstreams with clients. ARGV: upstream, the prefix of its
/// client keys. How many went. Runs after [`PART`].
const DELETE_CLIENTS: &str = r"
local n = 0
for _, issuer in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  n = n + redis.call('DEL', ARGV[2] .. part(issuer))
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return n
";

/// KEYS: the flow, its id, the principal's flows, every flow. ARGV: the row's JSON, flow id,
/// state hash, expires, now, max per principal, max in total. `{0, 0}` kept, `{1, n}` the
/// principal has n, `{2, n}` the vault has n, `{3, 0}` the state or id is taken.
const INSERT_FLOW: &str = r"
local now, expires = tonumber(ARGV[5]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local mine = redis.call('ZCARD', KEYS[3])
if mine >= tonumber(ARGV[6]) then return {1, mine} end
local all = redis.call('ZCARD', KEYS[4])
if all >= tonumber(ARGV[7]) then return {2, all} end
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return {3, 0} end
local ttl = math.max(1, expires - now)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl)
redis.call('ZADD', KEYS[3], expires, ARGV[2])
redis.call('ZADD', KEYS[4], expires, ARGV[2])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[3], math.max(1, tonumber(last[2]) - now))
return {0, 0}
";

/// KEYS: the flow. ARGV: the key prefix. The flow's JSON, gone from every index (nil when there
/// is none: taken already, expired, or never). Runs after [`PART`].
const TAKE_FLOW: &str = r"
local json = redis.call('GETDEL', KEYS[1])
if not json then return false end
local ok, row = pcall(cjson.decode, json)
if ok and type(row) == 'table' and type(row.flow_id) == 'string' and type(row.principal) == 'string' then
  redis.call('DEL', ARGV[1] .. 'vault:flowid:' .. row.flow_id)
  redis.call('ZREM', ARGV[1] .. 'vault:flows:principal:' .. part(row.principal), row.flow_id)
  redis.call('ZREM', ARGV[1] .. 'vault:flows', row.flow_id)
end
return json
";

/// KEYS: the lease. ARGV: the holder. 1 when it held it (and it is gone).
const RELEASE_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// The vault over the store's Redis connection.
pub(in crate::store) struct RedisVault {
    conn: ConnectionManager,
    put_credential: Script,
    delete_credential: Script,
    touch_credential: Script,
    put_client: Script,
    reseal_client: Script,
    delete_clients: Script,
    insert_flow: Script,
    take_flow: Script,
    release_lease: Script,
}

/// A credential row from its hash (`None`: gone, or not one).
fn credential_row(mut h: HashMap<String, String>) -> Option<CredentialRow> {
    let number = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok());
    Some(CredentialRow {
        version: number(h.get("v"))?,
        expires_ms: number(h.get("expires")),
        refresh_after_ms: number(h.get("refresh_after")),
        last_used_ms: number(h.get("last_used")).unwrap_or(0),
        updated_ms: number(h.get("updated")).unwrap_or(0),
        scopes: h
            .get("scopes")
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default(),
        principal: h.remove("principal")?,
        upstream: h.remove("upstream")?,
        identity: h.remove("identity")?,
        issuer: h.remove("issuer").unwrap_or_default(),
        sealed: h.remove("sealed")?,
    })
}

fn client_row(mut h: HashMap<String, String>) -> Option<ClientRow> {
    Some(ClientRow {
        registered_ms: h
            .get("registered")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        sealed_secret: h.remove("sealed_secret").filter(|s| !s.is_empty()),
        upstream: h.remove("upstream")?,
        issuer: h.remove("issuer")?,
        identity: h.remove("identity")?,
        client_id: h.remove("client_id")?,
        method: h.remove("method").unwrap_or_default(),
    })
}

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl RedisVault {
    pub(in crate::store) fn new(conn: ConnectionManager) -> RedisVault {
        RedisVault {
            conn,
            put_credential: Script::new(PUT_CREDENTIAL),
            delete_credential: Script::new(DELETE_CREDENTIAL),
            touch_credential: Script::new(TOUCH_CREDENTIAL),
            put_client: Script::new(&format!("{PART}{PUT_CLIENT}")),
            reseal_client: Script::new(RESEAL_CLIENT),
            delete_clients: Script::new(&format!("{PART}{DELETE_CLIENTS}")),
            insert_flow: Script::new(INSERT_FLOW),
            take_flow: Script::new(&format!("{PART}{TAKE_FLOW}")),
            release_lease: Script::new(RELEASE_LEASE),
        }
    }

    /// The hashes at `keys`, in one round trip.
    async fn hashes(&self, keys: &[String]) -> Result<Vec<HashMap<String, String>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = ::redis::pipe();
        for k in keys {
            pipe.add_command(cmd("HGETALL").arg(k).to_owned());
        }
        let mut conn = self.conn.clone();
        timed(pipe.query_async(&mut conn)).await
    }

    async fn members(&self, set: &str) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        timed(cmd("SMEMBERS").arg(set).query_async(&mut conn)).await
    }

    pub(in crate::store) async fn credential(
        &self,
        principal: &str,
        upstream: &str,
    ) -> Result<Option<CredentialRow>, StoreError> {
        let keys = [key(&format!("cred:{}", member(principal, upstream)))];
        let mut rows = self.hashes(&keys).await?;
        Ok(rows.pop().and_then(credential_row))
    }

    pub(in crate::store) async fn put_credential(
        &self,
        row: &CredentialRow,
        expect: Expect,
        max_per_principal: usize,
    ) -> Result<PutOutcome, StoreError> {
        let id = member(&row.principal, &row.upstream);
        let (mode, expected) = match expect {
            Expect::Absent => ("absent", 0),
            Expect::Version(v) => ("version", v),
            Expect::Any => ("any", 0),
        };
        let scopes = serde_json::to_string(&row.scopes).unwrap_or_else(|_| "[]".into());
        let mut call = self.put_credential.prepare_invoke();
        call.key(key(&format!("cred:{id}")))
            .key(key(&format!("creds:principal:{}", part(&row.principal))))
            .key(key("creds"))
            .key(key("refresh"))
            .arg(mode)
            .arg(expected)
            .arg(max_per_principal)
            .arg(&id)
            .arg(&row.principal)
            .arg(&row.upstream)
            .arg(&row.identity)
            .arg(&row.issuer)
            .arg(scopes)
            .arg(&row.sealed)
            .arg(opt(row.expires_ms))
            .arg(opt(row.refresh_after_ms))
            .arg(row.last_used_ms)
            .arg(row.updated_ms);
        let mut conn = self.conn.clone();
        let (outcome, n): (i64, i64) = timed(call.invoke_async(&mut conn)).await?;
        Ok(match outcome {
            1 => PutOutcome::Stored { version: n as u64 },
            2 => PutOutcome::Full {
                held: n.max(0) as usize,
            },
            _ => PutOutcome::Conflict {
                found: u64::try_from(n).ok(),
            },
        })
    }

    pub(in crate::store) async fn touch_credential(
        &self,
        principal: &str,
        upstream: &str,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let mut call = self.touch_credential.prepare_invoke();
        call.key(key(&format!("cred:{}", member(principal, upstream))))
            .arg(now_ms);
        let mut conn = self.conn.clone();
        timed(call.invoke_async::<i64>(&mut conn)).await.map(drop)
    }

    /// The rows `filter` selects (from the principal's set when it names one, else every row).
    async fn selected(&self, filter: RowFilter<'_>) -> Result<Vec<CredentialRow>, StoreError> {
        let keys: Vec<String> = match filter.principal {
            Some(principal) => self
                .members(&key(&format!("creds:principal:{}", part(principal))))
                .await?
                .into_iter()
                .filter(|up| filter.upstream.is_none_or(|f| f == up))
                .map(|up| key(&format!("cred:{}", member(principal, &up))))
                .collect(),
            None => self
                .members(&key("creds"))
                .await?
                .into_iter()
                .map(|m| key(&format!("cred:{m}")))
                .collect(),
        };
        let mut rows: Vec<CredentialRow> = self
            .hashes(&keys)
            .await?
            .into_iter()
            .filter_map(credential_row)
            .filter(|r| filter.upstream.is_none_or(|f| f == r.upstream))
            .collect();
        rows.sort_by(|a, b| (&a.principal, &a.upstream).cmp(&(&b.principal, &b.upstream)));
        Ok(rows)
    }

    pub(in crate::store) async fn credentials(
        &self,
        filter: RowFilter<'_>,
        limit: usize,
    ) -> Result<Vec<CredentialRow>, StoreError> {
        let mut rows = self.selected(filter).await?;
        rows.truncate(limit);
        Ok(rows)
    }

    pub(in crate::store) async fn delete_credentials(
        &self,
        filter: RowFilter<'_>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut deleted = Vec::new();
        for row in self.selected(filter).await? {
            let id = member(&row.principal, &row.upstream);
            let mut call = self.delete_credential.prepare_invoke();
            call.key(key(&format!("cred:{id}")))
                .key(key(&format!("creds:principal:{}", part(&row.principal))))
                .key(key("creds"))
                .key(key("refresh"))
                .arg(&row.upstream)
                .arg(&id);
            let mut conn = self.conn.clone();
            if timed(call.invoke_async::<i64>(&mut conn)).await? == 1 {
                deleted.push((row.principal, row.upstream));
            }
        }
        Ok(deleted)
    }

    pub(in crate::store) async fn due_credentials(
        &self,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut conn = self.conn.clone();
        let mut due = cmd("ZRANGEBYSCORE");
        due.arg(key("refresh"))
            .arg("-inf")
            .arg(now_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(limit.min(i64::MAX as usize));
        let members: Vec<String> = timed(due.query_async(&mut conn)).await?;
        Ok(members
            .iter()
            .filter_map(|m| m.split_once(':'))
            .map(|(up, p)| (unpart(p), unpart(up)))
            .collect())
    }

    pub(in crate::store) async fn client(
        &self,
        upstream: &str,
        issuer: &str,
    ) -> Result<Option<ClientRow>, StoreError> {
        let keys = [key(&format!("client:{}:{}", part(upstream), part(issuer)))];
        Ok(self.hashes(&keys).await?.pop().and_then(client_row))
    }

    pub(in crate::store) async fn put_client(
        &self,
        row: &ClientRow,
        max_per_upstream: usize,
    ) -> Result<(), StoreError> {
        let up = part(&row.upstream);
        let mut call = self.put_client.prepare_invoke();
        call.key(key(&format!("client:{up}:{}", part(&row.issuer))))
            .key(key(&format!("clients:{up}")))
            .key(key("clients"))
            .arg(&row.upstream)
            .arg(&row.issuer)
            .arg(&row.identity)
            .arg(&row.client_id)
            .arg(&row.method)
            .arg(row.sealed_secret.as_deref().unwrap_or_default())
            .arg(row.registered_ms)
            .arg(max_per_upstream.max(1))
            .arg(key(&format!("client:{up}:")));
        let mut conn = self.conn.clone();
        timed(call.invoke_async::<i64>(&mut conn)).await.map(drop)
    }

    pub(in crate::store) async fn reseal_client(
        &self,
        upstream: &str,
        issuer: &str,
        old: &str,
        new: &str,
    ) -> Result<bool, StoreError> {
        let mut call = self.reseal_client.prepare_invoke();
        call.key(key(&format!("client:{}:{}", part(upstream), part(issuer))))
            .arg(old)
            .arg(new);
        let mut conn = self.conn.clone();
        Ok(timed(call.invoke_async::<i64>(&mut conn)).await? == 1)
    }

    pub(in crate::store) async fn clients(
        &self,
        upstream: Option<&str>,
    ) -> Result<Vec<ClientRow>, StoreError> {
        let upstreams = match upstream {
            Some(up) => vec![up.to_owned()],
            None => self.members(&key("clients")).await?,
        };
        let mut keys = Vec::new();
        for up in upstreams {
            let mut conn = self.conn.clone();
            let mut range = cmd("ZRANGE");
            range
                .arg(key(&format!("clients:{}", part(&up))))
                .arg(0)
                .arg(-1);
            let issuers: Vec<String> = timed(range.query_async(&mut conn)).await?;
            keys.extend(
                issuers
                    .iter()
                    .map(|iss| key(&format!("client:{}:{}", part(&up), part(iss)))),
            );
        }
        let mut rows: Vec<ClientRow> = self
            .hashes(&keys)
            .await?
            .into_iter()
            .filter_map(client_row)
            .collect();
        rows.sort_by(|a, b| (&a.upstream, &a.issuer).cmp(&(&b.upstream, &b.issuer)));
        Ok(rows)
    }

    pub(in crate::store) async fn delete_clients(
        &self,
        upstream: &str,
    ) -> Result<usize, StoreError> {
        let up = part(upstream);
        let mut call = self.delete_clients.prepare_invoke();
        call.key(key(&format!("clients:{up}")))
            .key(key("clients"))
            .arg(upstream)
            .arg(key(&format!("client:{up}:")));
        let mut conn = self.conn.clone();
        let n: i64 = timed(call.invoke_async(&mut conn)).await?;
        Ok(n.max(0) as usize)
    }

    pub(in crate::store) async fn insert_flow(
        &self,
        row: &FlowRow,
        bounds: VaultBounds,
        now_ms: u64,
    ) -> Result<FlowInsert, StoreError> {
        let json =
            serde_json::to_string(row).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let mut call = self.insert_flow.prepare_invoke();
        call.key(key(&format!("flow:{}", row.state_hash)))
            .key(key(&format!("flowid:{}", row.flow_id)))
            .key(key(&format!("flows:principal:{}", part(&row.principal))))
            .key(key("flows"))
            .arg(json)
            .arg(&row.flow_id)
            .arg(&row.state_hash)
            .arg(row.expires_ms)
            .arg(now_ms)
            .arg(bounds.pending_flows_per_user)
            .arg(bounds.pending_flows);
        let mut conn = self.conn.clone();
        let (outcome, n): (i64, i64) = timed(call.invoke_async(&mut conn)).await?;
        match outcome {
            0 => Ok(FlowInsert::Inserted),
            1 => Ok(FlowInsert::PrincipalFull(n.max(0) as usize)),
            2 => Ok(FlowInsert::Full(n.max(0) as usize)),
            _ => Ok(FlowInsert::Taken),
        }
    }

    pub(in crate::store) async fn flow(
        &self,
        flow_id: &str,
    ) -> Result<Option<FlowRow>, StoreError> {
        let mut conn = self.conn.clone();
        let hash: Option<String> = timed(
            cmd("GET")
                .arg(key(&format!("flowid:{flow_id}")))
                .query_async(&mut conn),
        )
        .await?;
        let Some(hash) = hash else { return Ok(None) };
        let json: Option<String> = timed(
            cmd("GET")
                .arg(key(&format!("flow:{hash}")))
                .query_async(&mut conn),
        )
        .await?;
        Ok(json
            .and_then(|j| serde_json::from_str::<FlowRow>(&j).ok())
            .filter(|row| row.flow_id == flow_id && row.expires_ms > crate::store::now_ms()))
    }

    pub(in crate::store) async fn take_flow(
        &self,
        state_hash: &str,
    ) -> Result<Option<FlowRow>, StoreError> {
        let mut call = self.take_flow.prepare_invoke();
        call.key(key(&format!("flow:{state_hash}"))).arg(PREFIX);
        let mut conn = self.conn.clone();
        let json: Option<String> = timed(call.invoke_async(&mut conn)).await?;
        Ok(json
            .and_then(|j| serde_json::from_str::<FlowRow>(&j).ok())
            .filter(|row| row.state_hash == state_hash && row.expires_ms > crate::store::now_ms()))
    }

    pub(in crate::store) async fn acquire_lease(
        &self,
        principal: &str,
        upstream: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let mut set = cmd("SET");
        set.arg(key(&format!("lease:{}", member(principal, upstream))))
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg((ttl.as_millis() as u64).max(1));
        let answer: Option<String> = timed(set.query_async(&mut conn)).await?;
        Ok(answer.is_some())
    }

    pub(in crate::store) async fn release_lease(
        &self,
        principal: &str,
        upstream: &str,
        owner: &str,
    ) -> Result<bool, StoreError> {
        let mut call = self.release_lease.prepare_invoke();
        call.key(key(&format!("lease:{}", member(principal, upstream))))
            .arg(owner);
        let mut conn = self.conn.clone();
        Ok(timed(call.invoke_async::<i64>(&mut conn)).await? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_parts_split_one_way_and_come_back() {
        for text in [
            "alice",
            "a:b",
            "a%3Ab",
            "%",
            "%25:",
            "user:42@example.com",
            "",
        ] {
            assert!(!part(text).contains(':'), "{text}");
            assert_eq!(unpart(&part(text)), text);
        }
        assert_ne!(member("a:b", "c"), member("a", "b:c"));
    }
}
