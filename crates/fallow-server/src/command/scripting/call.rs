//! `redis.call` and `redis.pcall`: one command from a script, checked as Redis 7.0's `scriptCall` checks
//! it (known, arity, not `noscript`, no writes from a read-only script, ACL), on the shards the script
//! holds, its reply written in the script's RESP version and parsed back into a Lua value.
use super::convert::{error_table, reply_to_lua};
use crate::command::dispatch::{permitted_in, run_with_guards};
use crate::command::info::reaches_every_key;
use crate::command::{flags, key_positions, lookup, CommandSpec, Ctx, Keys};
use crate::scripting::{HeldShards, RunningScript};
use fallow_proto::reply_value::{parse_reply, ReplyValue};
use fallow_proto::ReplyWriter;
use mlua::{Lua, MultiValue, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a script that already wrote waits for the shard of a key it did not declare before failing.
const UNDECLARED_SHARD_WAIT: Duration = Duration::from_secs(1);

/// Which shards a run locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locking {
    /// Every shard: keys may be any (the default until a script is known to keep to its KEYS).
    All,
    /// The declared keys' shards, others taken when free (a script seen keeping to its KEYS).
    Declared,
    /// The declared keys' shards, and undeclared keys refused (`lua-strict-keys yes`).
    Strict,
}

/// One run's state, which `redis.call` borrows.
pub struct ScriptRun<'r, 'a, 's> {
    pub ctx: &'r mut Ctx<'a, 's>,
    pub running: Arc<RunningScript>,
    pub declared_keys: Vec<Vec<u8>>,
    pub locking: Locking,
    /// EVAL_RO, EVALSHA_RO: write commands are refused.
    pub read_only: bool,
    pub touched_undeclared: bool,
    pub wrote: bool,
    /// A shard it needed was busy before its first write: the run is to start over with every shard,
    /// and every later call fails so nothing runs twice.
    pub restart: bool,
}

const RESTART_MESSAGE: &str = "ERR script is starting over with every shard locked";

impl ScriptRun<'_, '_, '_> {
    /// `redis.call(...)` / `redis.pcall(...)`: (reply, whether it is an error to raise).
    pub fn call(&mut self, lua: &Lua, resp: i64, args: MultiValue) -> mlua::Result<(Value, bool)> {
        let args = match command_args(&args) {
            Ok(args) => args,
            Err(message) => return Ok((refusal(lua, message)?, true)),
        };
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match self.execute(&refs, resp == 3) {
            Ok(reply) => reply_value(lua, &reply, resp == 3),
            Err(message) => Ok((refusal(lua, &message)?, true)),
        }
    }

    /// `redis.acl_check_cmd(...)`: (allowed, error to raise).
    pub fn acl_check(&mut self, lua: &Lua, args: MultiValue) -> mlua::Result<(bool, Value)> {
        let args = match command_args(&args) {
            Ok(args) => args,
            Err(message) => return Ok((false, refusal(lua, message)?)),
        };
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let Some((_, spec)) = lookup(refs[0]) else {
            let message = "ERR Invalid command passed to redis.acl_check_cmd()";
            return Ok((false, refusal(lua, message)?));
        };
        let allowed = acl_allows(self.ctx, spec, &refs);
        Ok((allowed, Value::Nil))
    }

    /// Runs one command; Ok is its reply's bytes, Err a refusal's error text (code and message, in
    /// Redis's wording).
    fn execute(&mut self, args: &[&[u8]], resp3: bool) -> Result<Vec<u8>, String> {
        if self.restart {
            return Err(RESTART_MESSAGE.into());
        }
        let Some((index, spec)) = lookup(args[0]) else {
            return Err("ERR Unknown Redis command called from script".into());
        };
        if !spec.arity_ok(args.len()) {
            return Err("ERR Wrong number of args calling Redis command from script".into());
        }
        if spec.flags & flags::NOSCRIPT != 0 {
            return Err("ERR This Redis command is not allowed from script".into());
        }
        if self.read_only && spec.flags & flags::WRITE != 0 {
            return Err("ERR Write commands are not allowed from read-only scripts.".into());
        }
        let lua_context = crate::acl::log::Context::Lua;
        if permitted_in(self.ctx.server, self.ctx.conn, spec, args, lua_context).is_err() {
            return Err(
                "ERR The user executing the script can't run this command or subcommand".into(),
            );
        }
        self.lock_keys_of(spec, args)?;
        Ok(self.run_command(index, spec, args, resp3))
    }

    fn run_command(
        &mut self,
        index: usize,
        spec: &CommandSpec,
        args: &[&[u8]],
        resp3: bool,
    ) -> Vec<u8> {
        let server = self.ctx.server;
        if spec.flags & flags::WRITE != 0 {
            self.wrote = true;
            self.running.wrote.store(true, Ordering::Relaxed);
        }
        let mut out = ReplyWriter::new(resp3);
        let started = Instant::now();
        let guards = std::mem::replace(
            &mut self.ctx.guards,
            server.store.lock_keys(std::iter::empty::<&[u8]>()),
        );
        self.ctx.guards =
            run_with_guards(server, self.ctx.conn, &mut out, spec, args, guards, true);
        crate::command::dispatch::feed_monitors(server, self.ctx.conn, spec, args, true);
        let (calls, micros) = &server.command_stats[index];
        calls.fetch_add(1, Ordering::Relaxed);
        micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        out.buf
    }

    /// Makes sure the run holds the shards of the command's keys (see `Locking`).
    fn lock_keys_of(&mut self, spec: &CommandSpec, args: &[&[u8]]) -> Result<(), String> {
        let store = &self.ctx.server.store;
        let needed: Vec<usize> = if reaches_every_key(spec.info, args) {
            self.touched_undeclared = true;
            if self.locking == Locking::Strict {
                return Err(format!(
                    "ERR '{}' reaches every key, which lua-strict-keys refuses in scripts",
                    spec.name
                ));
            }
            (0..store.shard_count()).collect()
        } else if matches!(spec.keys, Keys::None) {
            return Ok(());
        } else {
            let mut needed = Vec::new();
            for position in key_positions(spec.info, args) {
                self.check_declared(args[position])?;
                needed.push(store.shard_index(args[position]));
            }
            needed
        };
        for index in needed {
            self.take_shard(index)?;
        }
        Ok(())
    }

    fn check_declared(&mut self, key: &[u8]) -> Result<(), String> {
        if self.declared_keys.iter().any(|declared| declared == key) {
            return Ok(());
        }
        self.touched_undeclared = true;
        if self.locking == Locking::Strict {
            return Err(format!(
                "ERR script accessed key '{}' that is not in KEYS (lua-strict-keys is on)",
                String::from_utf8_lossy(&key[..key.len().min(128)])
            ));
        }
        Ok(())
    }

    /// Holds shard `index`: already held, taken now if free, or (before any write) the run starts over
    /// with every shard; after a write it waits a bounded time, then fails.
    fn take_shard(&mut self, index: usize) -> Result<(), String> {
        let guards = &mut self.ctx.guards;
        if guards.holds(index) || guards.try_add(index) {
            return self.note_shards();
        }
        if !self.wrote {
            self.restart = true;
            return Err(RESTART_MESSAGE.into());
        }
        let deadline = Instant::now() + UNDECLARED_SHARD_WAIT;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            if self.ctx.guards.try_add(index) {
                return self.note_shards();
            }
        }
        Err("ERR a key the script did not declare is on a shard another client holds; list every key the script uses in KEYS".into())
    }

    fn note_shards(&mut self) -> Result<(), String> {
        let guards = &self.ctx.guards;
        let held = if guards.holds_all() {
            HeldShards::All
        } else {
            HeldShards::Some(guards.indices().collect())
        };
        self.running.set_shards(held);
        Ok(())
    }
}

/// Whether the connection's user may run the command (ACL), without logging a denial.
fn acl_allows(ctx: &Ctx, spec: &CommandSpec, args: &[&[u8]]) -> bool {
    let server = ctx.server;
    if ctx.conn.user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed) {
        return true;
    }
    server
        .acl
        .read()
        .check(&ctx.conn.user, spec.info, args)
        .is_ok()
}

/// `{err=...}` for a refusal's error text (code and message).
fn refusal(lua: &Lua, text: &str) -> mlua::Result<Value> {
    let mut with_dash = Vec::with_capacity(text.len() + 1);
    with_dash.push(b'-');
    with_dash.extend_from_slice(text.as_bytes());
    error_table(lua, &with_dash)
}

/// A reply as `redis.call` returns it: (value, whether it is an error reply).
fn reply_value(lua: &Lua, reply: &[u8], resp3: bool) -> mlua::Result<(Value, bool)> {
    match parse_reply(reply) {
        Ok((ReplyValue::Error(text), _)) => {
            let mut with_dash = Vec::with_capacity(text.len() + 1);
            with_dash.push(b'-');
            with_dash.extend_from_slice(&text);
            Ok((error_table(lua, &with_dash)?, true))
        }
        Ok((value, _)) => Ok((reply_to_lua(lua, &value, resp3)?, false)),
        Err(error) => {
            let message = format!("ERR cannot read the command's reply: {error:?}");
            Ok((error_table(lua, message.as_bytes())?, true))
        }
    }
}

/// A call's arguments as Redis converts them: strings as they are, numbers as `%.17g`.
fn command_args(args: &MultiValue) -> Result<Vec<Vec<u8>>, &'static str> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    args.iter()
        .map(|arg| match arg {
            Value::String(text) => Ok(text.as_bytes().to_vec()),
            Value::Integer(number) => Ok(format_g17(*number as f64).into_bytes()),
            Value::Number(number) => Ok(format_g17(*number).into_bytes()),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers"),
        })
        .collect()
}

/// C's `%.17g`, as Redis 7.0 formats a number argument (NaN as glibc prints it).
fn format_g17(value: f64) -> String {
    if value.is_nan() {
        return if value.is_sign_negative() {
            "-nan".into()
        } else {
            "nan".into()
        };
    }
    fallow_proto::reply::format_double(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_become_arguments_as_redis_formats_them() {
        assert_eq!(format_g17(0.1), "0.10000000000000001");
        assert_eq!(format_g17(3.5), "3.5");
        assert_eq!(format_g17(1e20), "1e+20");
        assert_eq!(format_g17(-0.0), "-0");
        assert_eq!(format_g17(f64::INFINITY), "inf");
        assert_eq!(format_g17(-f64::NAN), "-nan");
    }
}
