//! The connection to fallow: a small pool of authenticated connections (shared-memory channels on the local
//! Unix socket when the server grants them), the fs tenant's setup, and what happens when fallow goes away:
//! every call fails fast while it is away, the filesystem reads its backing directory, one line is logged,
//! and a watcher thread reconnects.
use crate::stats::Counters;
use fallow_client::connection::{Connection, ConnectionSettings};
use fallow_client::{ClientError, Reply};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// Idle connections kept (more are opened while threads need them, then closed).
pub const IDLE_CONNECTIONS_MAX: usize = 16;

/// How the fs reaches and authenticates to fallow, and which tenant it stores blocks under.
#[derive(Clone, Debug)]
pub struct RemoteConfig {
    /// fallow-client's form: `unix:/path`, `unix:` or `host:port`.
    pub address: String,
    pub user: String,
    pub password: Option<String>,
    pub tenant: String,
    pub weight: u32,
    pub tier2: bool,
}

/// `--server` as fallow-client names nodes: `tcp://h:p` → `h:p`; `unix:...` unchanged.
pub fn client_address(server: &str) -> Result<String, String> {
    if let Some(rest) = server.strip_prefix("tcp://") {
        if rest.is_empty() || !rest.contains(':') {
            return Err(format!("--server tcp://HOST:PORT expected, got '{server}'"));
        }
        return Ok(rest.to_string());
    }
    if server.starts_with("unix:") {
        return Ok(server.to_string());
    }
    Err(format!(
        "--server must be unix:PATH, unix: or tcp://HOST:PORT, got '{server}'"
    ))
}

/// Why a call did not reach fallow.
#[derive(Debug)]
pub struct Unavailable;

pub struct Remote {
    config: RemoteConfig,
    /// The password of the tenant's ACL user, made at setup (None: connections stay the configured user).
    tenant_password: Mutex<Option<String>>,
    idle: Mutex<Vec<Connection>>,
    available: AtomicBool,
    counters: Arc<Counters>,
}

fn error_text(reply: &Reply) -> Option<&str> {
    match reply {
        Reply::Error(text) => Some(text),
        _ => None,
    }
}

impl Remote {
    pub fn new(config: RemoteConfig, counters: Arc<Counters>) -> Remote {
        Remote {
            config,
            tenant_password: Mutex::new(None),
            idle: Mutex::new(Vec::new()),
            available: AtomicBool::new(false),
            counters,
        }
    }

    pub fn is_available(&self) -> bool {
        self.available.load(Relaxed)
    }

    /// Opens a connection authenticated as the configured user (the control connection's identity).
    fn open_as_user(&self) -> Result<Connection, String> {
        let mut connection = Connection::open(&self.config.address, ConnectionSettings::default())
            .map_err(|error| format!("cannot connect to {}: {error}", self.config.address))?;
        if let Some(password) = &self.config.password {
            let reply = connection
                .call(&[b"AUTH", self.config.user.as_bytes(), password.as_bytes()])
                .map_err(|error| error.to_string())?;
            if let Some(text) = error_text(&reply) {
                return Err(format!("AUTH as '{}' refused: {text}", self.config.user));
            }
        }
        Ok(connection)
    }

    /// Opens a data connection: the configured user, then the tenant's user when setup made one.
    fn open_data(&self) -> Result<Connection, String> {
        let mut connection = self.open_as_user()?;
        if let Some(password) = self.tenant_password.lock().clone() {
            let reply = connection
                .call(&[b"AUTH", self.config.tenant.as_bytes(), password.as_bytes()])
                .map_err(|error| error.to_string())?;
            if let Some(text) = error_text(&reply) {
                return Err(format!(
                    "AUTH as tenant '{}' refused: {text}",
                    self.config.tenant
                ));
            }
        }
        Ok(connection)
    }

    /// Connects, defines the tenant (ephemeral, its weight, tier 2 as asked) and an ACL user of its name
    /// with a fresh random password, so every data connection is that tenant. Where the configured user
    /// may not do that (no @admin), blocks are stored as the configured user's tenant: logged, not fatal.
    /// Returns a warning to log, if any.
    pub fn setup(&self) -> Result<Option<String>, String> {
        let mut control = self.open_as_user()?;
        let mut warning = None;
        if self.config.user != self.config.tenant {
            match self.define_tenant(&mut control) {
                Ok(password) => *self.tenant_password.lock() = Some(password),
                Err(why) => {
                    warning = Some(format!(
                        "cannot set up tenant '{}' ({why}): blocks are stored as user '{}'",
                        self.config.tenant, self.config.user
                    ));
                    *self.tenant_password.lock() = None;
                }
            }
        }
        let data = self.open_data()?;
        self.idle.lock().push(data);
        self.available.store(true, Relaxed);
        Ok(warning)
    }

    fn define_tenant(&self, control: &mut Connection) -> Result<String, String> {
        let config = &self.config;
        let weight = config.weight.to_string();
        let tier2: &[u8] = if config.tier2 { b"yes" } else { b"no" };
        let tenant = config.tenant.as_bytes();
        let call = |control: &mut Connection, args: &[&[u8]]| -> Result<(), String> {
            let reply = control.call(args).map_err(|error| error.to_string())?;
            error_text(&reply).map_or(Ok(()), |text| Err(text.to_string()))
        };
        call(
            control,
            &[
                b"TENANT",
                b"SET",
                tenant,
                b"WEIGHT",
                weight.as_bytes(),
                b"KIND",
                b"ephemeral",
                b"TIER2",
                tier2,
            ],
        )?;
        let password: String = {
            use rand::Rng;
            let mut rng = rand::thread_rng();
            (0..32)
                .map(|_| format!("{:x}", rng.gen_range(0..16u8)))
                .collect()
        };
        let add_password = format!(">{password}");
        call(
            control,
            &[
                b"ACL",
                b"SETUSER",
                tenant,
                b"on",
                add_password.as_bytes(),
                b"~*",
                b"&*",
                b"+@all",
                b"-@admin",
                b"-@dangerous",
                b"+info",
            ],
        )?;
        Ok(password)
    }

    /// At a clean exit: takes this process's password off the tenant's user again.
    pub fn remove_tenant_password(&self) {
        let Some(password) = self.tenant_password.lock().take() else {
            return;
        };
        if let Ok(mut control) = self.open_as_user() {
            let remove = format!("<{password}");
            let _ = control.call(&[
                b"ACL",
                b"SETUSER",
                self.config.tenant.as_bytes(),
                remove.as_bytes(),
            ]);
        }
    }

    /// Runs `work` on a pooled connection. A connection or protocol failure marks fallow away (the
    /// watcher reconnects) and is returned as `Unavailable`; error replies are the caller's to judge.
    pub fn with<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, ClientError>,
    ) -> Result<T, Unavailable> {
        if !self.is_available() {
            return Err(Unavailable);
        }
        let pooled = self.idle.lock().pop();
        let mut connection = match pooled {
            Some(connection) => connection,
            None => match self.open_data() {
                Ok(connection) => connection,
                Err(why) => return Err(self.went_away(&why)),
            },
        };
        match work(&mut connection) {
            Ok(value) => {
                let mut idle = self.idle.lock();
                if idle.len() < IDLE_CONNECTIONS_MAX {
                    idle.push(connection);
                }
                Ok(value)
            }
            Err(error) => Err(self.went_away(&error.to_string())),
        }
    }

    fn went_away(&self, why: &str) -> Unavailable {
        self.counters.fallow_errors.fetch_add(1, Relaxed);
        if self.available.swap(false, Relaxed) {
            tracing::warn!(
                "fallow is unavailable ({why}): reading the backing directory until it is back"
            );
        }
        self.idle.lock().clear();
        Unavailable
    }

    /// The watcher's step while fallow is away: true when it is back.
    pub fn try_reconnect(&self) -> bool {
        match self.setup() {
            Ok(warning) => {
                if let Some(warning) = warning {
                    tracing::warn!("{warning}");
                }
                self.counters.fallow_reconnects.fetch_add(1, Relaxed);
                tracing::info!("fallow is back: caching again");
                true
            }
            Err(_) => false,
        }
    }

    /// GETs `keys` in one pipeline; None for a key fallow does not hold.
    pub fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, Unavailable> {
        self.with(|connection| {
            for key in keys {
                connection.push(&[b"GET", key]);
            }
            connection.flush()?;
            let mut values = Vec::with_capacity(keys.len());
            for _ in keys {
                values.push(match connection.read_reply()? {
                    Reply::Bulk(value) => Some(value),
                    _ => None,
                });
            }
            Ok(values)
        })
    }

    /// Stores one value; Ok(false) when fallow refused it (out of memory and nothing to evict).
    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<bool, Unavailable> {
        self.with(|connection| Ok(error_text(&connection.call(&[b"SET", key, value])?).is_none()))
    }

    /// Stores values in one pipeline; for each, whether fallow took it (false: refused, out of memory).
    pub fn set_many(
        &self,
        entries: &[(Vec<u8>, std::sync::Arc<Vec<u8>>)],
    ) -> Result<Vec<bool>, Unavailable> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        self.with(|connection| {
            for (key, value) in entries {
                connection.push(&[b"SET", key, value]);
            }
            connection.flush()?;
            entries
                .iter()
                .map(|_| Ok(error_text(&connection.read_reply()?).is_none()))
                .collect()
        })
    }

    /// Whether fallow holds each of `keys`, in one pipeline.
    pub fn exists_many(&self, keys: &[Vec<u8>]) -> Result<Vec<bool>, Unavailable> {
        self.with(|connection| {
            for key in keys {
                connection.push(&[b"EXISTS", key]);
            }
            connection.flush()?;
            keys.iter()
                .map(|_| Ok(matches!(connection.read_reply()?, Reply::Int(1))))
                .collect()
        })
    }

    /// Deletes `keys` (UNLINK: fallow frees them off the request path).
    pub fn unlink(&self, keys: &[Vec<u8>]) -> Result<(), Unavailable> {
        if keys.is_empty() {
            return Ok(());
        }
        self.with(|connection| {
            let mut args: Vec<&[u8]> = vec![b"UNLINK"];
            args.extend(keys.iter().map(Vec::as_slice));
            connection.call(&args).map(|_| ())
        })
    }

    /// A reply's bytes, for the control calls (INFO, FSCACHE) the watcher makes.
    pub fn call(&self, args: &[&[u8]]) -> Result<Reply, Unavailable> {
        self.with(|connection| connection.call(args))
    }
}

/// One reading of the pool, from `INFO elastic stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolReading {
    pub target_bytes: u64,
    pub resident_bytes: u64,
    /// Keys the pool has evicted or reclaimed so far (`evicted_keys` plus the two reclaim paths' objects):
    /// a count that grows while the pool is full.
    pub evictions: u64,
}

/// The pool's figures from the reply to `INFO elastic stats`.
pub fn parse_pool(info: &[u8]) -> Option<PoolReading> {
    let text = std::str::from_utf8(info).ok()?;
    let field = |name: &str| {
        text.lines().find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(':')?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    Some(PoolReading {
        target_bytes: field("pool_target_bytes")?,
        resident_bytes: field("pool_resident_bytes")?,
        evictions: field("evicted_keys")?
            + field("reclaim_careful_objects").unwrap_or(0)
            + field("reclaim_fast_objects").unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_map_to_client_nodes() {
        assert_eq!(
            client_address("tcp://127.0.0.1:7000").unwrap(),
            "127.0.0.1:7000"
        );
        assert_eq!(
            client_address("unix:/run/f.sock").unwrap(),
            "unix:/run/f.sock"
        );
        assert_eq!(client_address("unix:").unwrap(), "unix:");
        assert!(client_address("tcp://").is_err());
        assert!(client_address("10.0.0.1:7000").is_err());
    }

    #[test]
    fn pool_fields_are_read_from_info() {
        let info = b"# Stats\r\nevicted_keys:7\r\n# Elastic\r\nmemory_mode:elastic\r\npool_target_bytes:1000\r\n\
                     pool_resident_bytes:250\r\nreclaim_careful_objects:2\r\nreclaim_fast_objects:1\r\n";
        let reading = PoolReading {
            target_bytes: 1000,
            resident_bytes: 250,
            evictions: 10,
        };
        assert_eq!(parse_pool(info), Some(reading));
        assert_eq!(parse_pool(b"pool_target_bytes:x\r\n"), None);
        // Without the stats section there is no eviction count: no reading.
        assert_eq!(
            parse_pool(b"pool_target_bytes:1000\r\npool_resident_bytes:250\r\n"),
            None
        );
    }
}
