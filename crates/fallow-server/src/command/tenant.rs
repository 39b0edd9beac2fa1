//! TENANT: defining and inspecting tenants (weight, kind, keyspace) at run time. What a tenant is and how
//! connections map to tenants lives in `crate::tenants`; INFO's `tenants` section is `crate::tenants::
//! info_section` over `shards::tenant_snapshots`.
use super::reply::help_reply;
use super::shards::tenant_snapshots;
use super::{is, subcommand_error, Ctx, Handler, SYNTAX};
use crate::tenants::{self, parse_kind, parse_shared, parse_tier2, parse_weight, WEIGHT_DEFAULT};
use fallow_store::{TenantKind, TenantSpec};

pub const HANDLERS: &[(&str, Handler)] = &[("tenant", tenant)];

const HELP: &[&str] = &[
    "SET <name> [WEIGHT <weight>] [KIND ephemeral|persistent] [SHARED yes|no] [TIER2 yes|no]",
    "    Create a tenant or change one; options left out keep their value (a new tenant: weight 100,",
    "    ephemeral, not shared, tier 2 on). TIER2 no: an ephemeral tenant's items are evicted rather",
    "    than written to tier 2 (a persistent tenant keeps tier 2). A RESP connection is the tenant",
    "    named like its ACL user.",
    "GET <name>",
    "    Weight, kind, keyspace, tier 2, resident bytes, share, fairness, hits, misses and evictions of a tenant.",
    "LIST",
    "    Names of every tenant.",
];

fn tenant(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1];
    match args.len() {
        2 if is(sub, "help") => help_reply(ctx, "TENANT", HELP),
        2 if is(sub, "list") => list(ctx),
        3 if is(sub, "get") => get(ctx, args[2]),
        len if len >= 3 && is(sub, "set") => set(ctx, args[2], &args[3..]),
        _ if ["help", "list", "get", "set"]
            .iter()
            .any(|name| is(sub, name)) =>
        {
            let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
            ctx.out.error(&super::arity_error(&format!("tenant|{sub}")))
        }
        _ => subcommand_error(ctx, args),
    }
}

fn list(ctx: &mut Ctx) {
    let names: Vec<String> = tenants::snapshots(&ctx.server.store, |_| {})
        .into_iter()
        .map(|snapshot| snapshot.name)
        .collect();
    ctx.out.bulks(names.iter().map(|name| name.as_bytes()));
}

fn get(ctx: &mut Ctx, name: &[u8]) {
    let name = String::from_utf8_lossy(name);
    let Some(snapshot) = tenant_snapshots(ctx)
        .into_iter()
        .find(|snapshot| snapshot.name == name)
    else {
        return ctx.out.error(&format!("ERR no such tenant '{name}'"));
    };
    let fields = tenants::fields(&snapshot);
    ctx.out.map_len(fields.len());
    for (field, value) in fields {
        ctx.out.bulk(field.as_bytes());
        match field {
            "kind" | "shared" | "tier2" | "share" | "fairness" => ctx.out.bulk(value.as_bytes()),
            _ => ctx.out.int(value.parse().unwrap_or(i64::MAX)),
        }
    }
}

fn set(ctx: &mut Ctx, name: &[u8], options: &[&[u8]]) {
    let name = String::from_utf8_lossy(name).into_owned();
    if !tenants::valid_name(&name) {
        return ctx.out.error(&format!(
            "ERR invalid tenant name '{name}': 1..{} printable characters without ':' ',' '='",
            tenants::NAME_BYTES_MAX
        ));
    }
    let store = &ctx.server.store;
    let current = store.tenant_id(&name).and_then(|id| store.tenant_spec(id));
    let spec = match apply_options(current.unwrap_or_else(|| new_spec(&name)), options) {
        Ok(spec) => spec,
        Err(reply) => return ctx.out.error(&reply),
    };
    if let Err(error) = store.define_tenant(spec) {
        return ctx.out.error(&format!("ERR {error}"));
    }
    ctx.server.tenants_changed();
    // This connection sees the change at once; others before their next batch.
    ctx.conn.rebind_tenant(ctx.server);
    ctx.out.ok();
}

fn new_spec(name: &str) -> TenantSpec {
    TenantSpec {
        name: name.to_string(),
        weight: WEIGHT_DEFAULT,
        kind: TenantKind::Ephemeral,
        shared: false,
        tier2: true,
    }
}

/// Applies `WEIGHT w`, `KIND k`, `SHARED yes|no` and `TIER2 yes|no` pairs; Err is the reply.
fn apply_options(mut spec: TenantSpec, options: &[&[u8]]) -> Result<TenantSpec, String> {
    if !options.len().is_multiple_of(2) {
        return Err(SYNTAX.into());
    }
    for pair in options.chunks(2) {
        let value = String::from_utf8_lossy(pair[1]);
        let result = if is(pair[0], "weight") {
            parse_weight(&value).map(|weight| spec.weight = weight)
        } else if is(pair[0], "kind") {
            parse_kind(&value).map(|kind| spec.kind = kind)
        } else if is(pair[0], "shared") {
            parse_shared(&value).map(|shared| spec.shared = shared)
        } else if is(pair[0], "tier2") {
            parse_tier2(&value).map(|tier2| spec.tier2 = tier2)
        } else {
            return Err(SYNTAX.into());
        };
        result.map_err(|error| format!("ERR {error}"))?;
    }
    tenants::check_tier2(&spec).map_err(|error| format!("ERR {error}"))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_update_only_what_they_name() {
        let base = TenantSpec {
            name: "web".into(),
            weight: 300,
            kind: TenantKind::Persistent,
            shared: true,
            tier2: true,
        };
        let spec = apply_options(base.clone(), &[b"weight", b"50"]).unwrap();
        assert_eq!(
            (spec.weight, spec.kind, spec.shared),
            (50, TenantKind::Persistent, true)
        );
        let spec = apply_options(base.clone(), &[b"KIND", b"ephemeral", b"shared", b"no"]).unwrap();
        assert_eq!(
            (spec.weight, spec.kind, spec.shared),
            (300, TenantKind::Ephemeral, false)
        );
        assert!(apply_options(base.clone(), &[b"weight"]).is_err());
        assert!(apply_options(base.clone(), &[b"weight", b"0"]).is_err());
        assert!(apply_options(base.clone(), &[b"color", b"red"]).is_err());
        assert!(apply_options(base.clone(), &[b"kind", b"durable"]).is_err());
        assert!(
            apply_options(base.clone(), &[b"tier2", b"no"]).is_err(),
            "a persistent tenant keeps tier 2"
        );
        assert!(apply_options(base.clone(), &[b"tier2", b"maybe"]).is_err());
        let spec = apply_options(base, &[b"kind", b"ephemeral", b"TIER2", b"no"]).unwrap();
        assert_eq!((spec.kind, spec.tier2), (TenantKind::Ephemeral, false));
    }
}
