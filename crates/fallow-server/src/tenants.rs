//! Tenants as the server sees them (Mortar §5.2, DESIGN.md "Tenants"): parsing tenant declarations
//! (`name:weight[:kind[:shared[:tier2]]]` from the TOML `tenants` list and `--tenant` flags), which tenant a
//! connection writes as and which keyspace it sees (`TenantBinding`), and per-tenant figures summed over
//! the shards (INFO tenants, TENANT GET).
//!
//! A RESP connection is the tenant named like its ACL user, else `default`; the memcached listener is the
//! tenant named by the `memcache-tenant` setting, else `default`. Bindings are re-resolved when
//! `Server::tenant_generation` moves (TENANT SET, CONFIG SET memcache-tenant) or the user changes.
use fallow_store::{keyspace, Shard, Store, TenantId, TenantKind, TenantSnapshot, TenantSpec};

/// Most bytes in a tenant name.
pub const NAME_BYTES_MAX: usize = 64;
/// Largest weight (the store's limit).
pub const WEIGHT_MAX: u32 = 1_000_000;
/// Weight of a tenant declared without one.
pub const WEIGHT_DEFAULT: u32 = 100;

/// Tenant names appear in INFO lines (`tenant_<name>:...`), so they are printable ASCII without the
/// characters INFO and the declaration syntax use as separators.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && !matches!(byte, b':' | b',' | b'='))
}

pub fn parse_weight(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|weight| (1..=WEIGHT_MAX).contains(weight))
        .ok_or_else(|| format!("weight must be an integer 1..{WEIGHT_MAX}, got '{text}'"))
}

pub fn parse_kind(text: &str) -> Result<TenantKind, String> {
    TenantKind::from_name(text)
        .ok_or_else(|| format!("kind must be ephemeral or persistent, got '{text}'"))
}

pub fn parse_shared(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("shared must be yes or no, got '{text}'")),
    }
}

pub fn parse_tier2(text: &str) -> Result<bool, String> {
    parse_shared(text).map_err(|_| format!("tier2 must be yes or no, got '{text}'"))
}

/// Why a spec cannot be: a persistent tenant keeps tier 2 (its log there is its durability).
pub fn check_tier2(spec: &TenantSpec) -> Result<(), String> {
    match spec.kind == TenantKind::Persistent && !spec.tier2 {
        true => Err("a persistent tenant keeps tier 2 (TIER2 no is for ephemeral tenants)".into()),
        false => Ok(()),
    }
}

/// Parses a declaration `name:weight[:kind[:shared[:tier2]]]` (kind defaults to ephemeral, shared to
/// no, tier2 to yes: `tenants.conf` files written before the field still load).
pub fn parse_declaration(text: &str) -> Result<TenantSpec, String> {
    let parts: Vec<&str> = text.trim().split(':').collect();
    if !(2..=5).contains(&parts.len()) {
        return Err(format!(
            "tenant '{text}': expected name:weight[:kind[:shared[:tier2]]]"
        ));
    }
    let name = parts[0];
    if !valid_name(name) {
        return Err(format!(
            "tenant '{text}': names are 1..{NAME_BYTES_MAX} printable characters without ':' ',' '='"
        ));
    }
    let context = |error: String| format!("tenant '{text}': {error}");
    let spec = TenantSpec {
        name: name.to_string(),
        weight: parse_weight(parts[1]).map_err(context)?,
        kind: parts
            .get(2)
            .map_or(Ok(TenantKind::Ephemeral), |kind| parse_kind(kind))
            .map_err(context)?,
        // The default tenant always lives in the common keyspace.
        shared: match parts.get(3) {
            Some(shared) => parse_shared(shared).map_err(context)?,
            None => name == "default",
        },
        tier2: parts
            .get(4)
            .map_or(Ok(true), |tier2| parse_tier2(tier2))
            .map_err(context)?,
    };
    check_tier2(&spec).map_err(context)?;
    Ok(spec)
}

/// Which tenant a connection writes as and which namespace its keys live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantBinding {
    pub tenant: TenantId,
    pub namespace: u16,
    /// `Server::tenant_generation` when this was resolved.
    pub generation: u64,
}

impl TenantBinding {
    /// The default tenant in the common keyspace; `generation` u64::MAX so the first check resolves.
    pub const DEFAULT: TenantBinding = TenantBinding {
        tenant: 0,
        namespace: 0,
        generation: u64::MAX,
    };

    /// The tenant named `name`, or the default tenant when there is none.
    pub fn resolve(store: &Store, generation: u64, name: &str) -> TenantBinding {
        let tenant = store.tenant_id(name).unwrap_or(0);
        let namespace = store
            .tenant_spec(tenant)
            .map_or(0, |spec| spec.namespace(tenant));
        TenantBinding {
            tenant,
            namespace,
            generation,
        }
    }

    /// True when tenants changed since this binding was resolved.
    pub fn is_stale(&self, generation: u64) -> bool {
        self.generation != generation
    }

    /// The keyspace address of database `db` for this tenant.
    pub fn address(&self, db: usize) -> usize {
        keyspace(self.tenant, self.namespace, db)
    }
}

/// Every tenant with its counters summed over the shards `visit_shards` walks (so callers that already
/// hold every shard, inside EXEC, can pass their own guards instead of locking again).
pub fn snapshots(
    store: &Store,
    visit_shards: impl FnOnce(&mut dyn FnMut(&mut Shard)),
) -> Vec<TenantSnapshot> {
    store.tenant_snapshots_with(visit_shards)
}

/// The fields of one tenant as INFO and TENANT GET list them, in order.
pub fn fields(snapshot: &TenantSnapshot) -> [(&'static str, String); 12] {
    [
        ("id", snapshot.id.to_string()),
        ("weight", snapshot.weight.to_string()),
        ("kind", snapshot.kind.name().to_string()),
        ("shared", crate::units::yes_no(snapshot.shared).to_string()),
        ("tier2", crate::units::yes_no(snapshot.tier2).to_string()),
        ("resident_bytes", snapshot.resident_bytes.to_string()),
        ("share", format!("{:.6}", snapshot.share)),
        ("fairness", format!("{:.6}", snapshot.fairness)),
        ("hits", snapshot.hits.to_string()),
        ("misses", snapshot.misses.to_string()),
        ("evicted_keys", snapshot.evicted_keys.to_string()),
        ("evicted_bytes", snapshot.evicted_bytes.to_string()),
    ]
}

/// The INFO `tenants` section: one `tenant_<name>:id=..,weight=..,...` line per tenant.
pub fn info_section(snapshots: &[TenantSnapshot], text: &mut String) {
    text.push_str("# Tenants\r\n");
    for snapshot in snapshots {
        let values: Vec<String> = fields(snapshot)
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        text.push_str(&format!(
            "tenant_{}:{}\r\n",
            snapshot.name,
            values.join(",")
        ));
    }
}

/// Namespaces that may hold keys: the common one and those of non-shared tenants.
pub fn namespaces(store: &Store) -> Vec<u16> {
    let mut namespaces = vec![0];
    for id in 1..fallow_store::pool::TENANTS_MAX as TenantId {
        let Some(spec) = store.tenant_spec(id) else {
            break;
        };
        if !spec.shared {
            namespaces.push(id);
        }
    }
    namespaces
}

/// Defines the tenants of the startup configuration; Err names the first that the store refused. The
/// caller bumps the tenant generation (`Server::tenants_changed`).
pub fn define_configured(store: &Store, declarations: &[String]) -> Result<(), String> {
    for declaration in declarations {
        let spec = parse_declaration(declaration)?;
        store
            .define_tenant(spec)
            .map_err(|error| format!("tenant '{declaration}': {error}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_parse_with_defaults() {
        let spec = parse_declaration("web:200").unwrap();
        assert_eq!(spec.name, "web");
        assert_eq!(spec.weight, 200);
        assert_eq!(spec.kind, TenantKind::Ephemeral);
        assert!(!spec.shared);
        assert!(spec.tier2, "tier 2 is on unless declared off");
        let spec = parse_declaration("db:50:persistent:yes").unwrap();
        assert_eq!(spec.kind, TenantKind::Persistent);
        assert!(spec.shared);
        assert!(spec.tier2);
        let spec = parse_declaration("fs:100:ephemeral:no:no").unwrap();
        assert_eq!(
            (spec.kind, spec.shared, spec.tier2),
            (TenantKind::Ephemeral, false, false)
        );
        assert!(parse_declaration("fs:100:ephemeral:no:yes").unwrap().tier2);
        assert!(
            parse_declaration("default:300").unwrap().shared,
            "the default tenant stays in the common keyspace"
        );
    }

    #[test]
    fn bad_declarations_are_rejected() {
        for bad in [
            "web",
            "web:0",
            "web:-1",
            "web:1000001",
            "web:x",
            "web:1:cache",
            "web:1:ephemeral:maybe",
            "web:1:ephemeral:no:extra",
            "web:1:ephemeral:no:no:extra",
            "web:1:persistent:no:no",
            "web:1:ephemeral:no:",
            ":1",
            "a,b:1",
        ] {
            assert!(parse_declaration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn names_exclude_separators() {
        assert!(valid_name("team-a.cache_1"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name("a=b"));
        assert!(!valid_name(&"x".repeat(NAME_BYTES_MAX + 1)));
    }

    #[test]
    fn info_lines_list_every_field() {
        let snapshot = TenantSnapshot {
            id: 3,
            name: "web".into(),
            weight: 200,
            kind: TenantKind::Persistent,
            shared: false,
            tier2: true,
            resident_bytes: 4096,
            share: 0.25,
            fairness: 1.5,
            hits: 7,
            misses: 2,
            evicted_keys: 1,
            evicted_bytes: 64,
        };
        let mut text = String::new();
        info_section(&[snapshot], &mut text);
        assert_eq!(
            text,
            "# Tenants\r\ntenant_web:id=3,weight=200,kind=persistent,shared=no,tier2=yes,resident_bytes=4096,\
             share=0.250000,fairness=1.500000,hits=7,misses=2,evicted_keys=1,evicted_bytes=64\r\n"
        );
    }
}
