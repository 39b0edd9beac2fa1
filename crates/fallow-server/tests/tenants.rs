//! Tenants through the command layer, in process: connections bound to tenants by their ACL user, and
//! a small elastic pool limit (set on the store directly, as the elastic controller would) so that a
//! persistent tenant filling the pool first evicts another tenant's ephemeral data, then gets the OOM
//! reply that names it. No sockets: commands run through `command::execute` on a `ConnState`.
use fallow_proto::ReplyWriter;
use fallow_server::clients::ClientKind;
use fallow_server::command;
use fallow_server::config::Config;
use fallow_server::connection::ConnState;
use fallow_server::server::Server;

const VALUE_BYTES: usize = 16 << 10;
const POOL_LIMIT_BYTES: usize = 24 << 20;

fn server() -> Server {
    Server::new(Config {
        threads: 1,
        shards: 2,
        tenants: vec!["cache:100".into(), "vault:100:persistent".into()],
        ..Config::default()
    })
}

fn connect(server: &Server) -> ConnState {
    let handle = server
        .register_client(ClientKind::Resp, "test:1".into(), String::new())
        .expect("below maxclients");
    let (sender, _receiver) = tokio::sync::mpsc::channel(16);
    let mut conn = ConnState::new(handle, true, sender);
    conn.refresh_tenant(server);
    conn
}

/// Runs one command and returns its raw reply.
fn run(server: &Server, conn: &mut ConnState, args: &[&[u8]]) -> Vec<u8> {
    let mut out = ReplyWriter::new(false);
    conn.now_ms = fallow_store::now_ms();
    command::dispatch::execute(server, conn, &mut out, args);
    out.buf
}

fn run_ok(server: &Server, conn: &mut ConnState, args: &[&[u8]]) {
    let reply = run(server, conn, args);
    assert_eq!(
        reply,
        b"+OK\r\n",
        "{:?}: {}",
        args,
        String::from_utf8_lossy(&reply)
    );
}

/// A connection authenticated as `user`, which the server creates with every permission.
fn user(server: &Server, admin: &mut ConnState, user: &str) -> ConnState {
    let name = user.as_bytes();
    run_ok(
        server,
        admin,
        &[b"acl", b"setuser", name, b"on", b"nopass", b"~*", b"+@all"],
    );
    let mut conn = connect(server);
    run_ok(server, &mut conn, &[b"auth", name, b"any"]);
    conn
}

fn dbsize(server: &Server, conn: &mut ConnState) -> usize {
    let reply = run(server, conn, &[b"dbsize"]);
    let text = String::from_utf8_lossy(&reply);
    text.trim_start_matches(':').trim_end().parse().unwrap()
}

fn tenant_field(server: &Server, name: &str, field: &str) -> u64 {
    let snapshots = server.store.tenant_snapshots();
    let snapshot = snapshots
        .iter()
        .find(|snapshot| snapshot.name == name)
        .unwrap();
    match field {
        "evicted_keys" => snapshot.evicted_keys,
        "resident_bytes" => snapshot.resident_bytes as u64,
        _ => unreachable!("{field}"),
    }
}

#[test]
fn users_see_only_their_tenants_keys() {
    let server = server();
    let mut admin = connect(&server);
    let mut cache = user(&server, &mut admin, "cache");
    let mut vault = user(&server, &mut admin, "vault");
    run_ok(&server, &mut cache, &[b"set", b"k", b"from-cache"]);
    run_ok(&server, &mut vault, &[b"set", b"k", b"from-vault"]);
    assert_eq!(
        run(&server, &mut cache, &[b"get", b"k"]),
        b"$10\r\nfrom-cache\r\n"
    );
    assert_eq!(
        run(&server, &mut vault, &[b"get", b"k"]),
        b"$10\r\nfrom-vault\r\n"
    );
    assert_eq!(run(&server, &mut admin, &[b"get", b"k"]), b"$-1\r\n");
    run_ok(&server, &mut vault, &[b"flushall"]);
    assert_eq!(dbsize(&server, &mut vault), 0);
    assert_eq!(
        dbsize(&server, &mut cache),
        1,
        "FLUSHALL stays in its namespace"
    );
}

#[test]
fn persistent_tenant_evicts_ephemeral_data_first_then_gets_oom() {
    let server = server();
    let mut admin = connect(&server);
    let mut cache = user(&server, &mut admin, "cache");
    let mut vault = user(&server, &mut admin, "vault");
    let value = vec![b'x'; VALUE_BYTES];
    let cache_keys = POOL_LIMIT_BYTES / 2 / VALUE_BYTES;
    for index in 0..cache_keys {
        let key = format!("c{index}");
        run_ok(&server, &mut cache, &[b"set", key.as_bytes(), &value]);
    }
    assert_eq!(dbsize(&server, &mut cache), cache_keys);
    server.store.set_pool_limit_bytes(POOL_LIMIT_BYTES);

    // More than the pool holds: the vault must push the cache out, then run out of room.
    let mut stored = 0;
    let mut refusal = Vec::new();
    for index in 0..2 * POOL_LIMIT_BYTES / VALUE_BYTES {
        let key = format!("v{index}");
        let reply = run(&server, &mut vault, &[b"set", key.as_bytes(), &value]);
        if reply != b"+OK\r\n" {
            refusal = reply;
            break;
        }
        stored += 1;
    }
    assert_eq!(
        String::from_utf8_lossy(&refusal),
        "-OOM command not allowed: no room for persistent data of tenant 'vault' \
         (the pool is full of persistent data)\r\n"
    );
    assert!(
        tenant_field(&server, "cache", "evicted_keys") > 0,
        "the ephemeral tenant lost keys"
    );
    assert_eq!(
        tenant_field(&server, "cache", "resident_bytes"),
        0,
        "every ephemeral byte went before the refusal"
    );
    assert!(
        stored > cache_keys,
        "the vault used room the cache had held ({stored} keys)"
    );
    assert_eq!(
        dbsize(&server, &mut vault),
        stored,
        "no persistent key was evicted"
    );
    assert_eq!(tenant_field(&server, "vault", "evicted_keys"), 0);

    // An ephemeral writer still gets the Redis text; fixed mode keeps it for everyone.
    let reply = run(&server, &mut cache, &[b"set", b"late", &value]);
    assert_eq!(reply, format!("-{}\r\n", command::OOM).into_bytes());
    server.store.set_pool_limit_bytes(0);
    assert_eq!(
        command::oom_error(&server, server.store.tenant_id("vault").unwrap()),
        command::OOM
    );
}
