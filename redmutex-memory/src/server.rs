//! The in-memory server's request handling: plain commands go to the key space; `EVAL`,
//! `EVALSHA` and `SCRIPT LOAD` run redmutex's own Lua scripts in an embedded Lua 5.1 (the
//! version inside Redis), with `redis.call` and `redis.pcall` answered by the key space,
//! so the scripts — the rules — are the same ones a Redis server runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mlua::{
    chunk::ChunkMode, Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue,
    Variadic,
};

use super::broker::Broker;
use super::keyspace::{CommandError, Keyspace, Reply};
use crate::lock;

/// What a script's commands see and change, kept in the Lua state's app data so that the
/// `redis.call` callback reaches it.
struct State {
    keyspace: Keyspace,
    broker: Arc<Broker>,
    /// The time the current request runs at, in Unix microseconds: fixed for the whole of
    /// a script, as in Redis 7.
    now_us: u64,
    /// The error `redis.call` raised, for the script's error reply.
    raised: Option<CommandError>,
}

/// One in-memory server: its data, its scripts, its Lua interpreter.
pub(crate) struct Server {
    lua: Lua,
    /// Scripts by SHA-1, compiled once.
    scripts: HashMap<String, Function>,
    /// The scripts sent whole to this server so far (kept across restarts: their SHA-1
    /// and byte code are arithmetic, not state). A few dozen at most: redmutex's own.
    known: Vec<Arc<Compiled>>,
}

/// A script body, its SHA-1 and its Lua byte code.
struct Compiled {
    body: Vec<u8>,
    sha: String,
    bytecode: Vec<u8>,
}

/// Every script body compiled in this process, shared by all its servers: a test or a
/// simulation starts many servers (and restarts them), each of which would otherwise
/// parse the same scripts again — most of the time a short simulated run spent. Bounded,
/// in case a program sends endless distinct bodies: past the bound, a body is compiled
/// per server.
static COMPILED: Mutex<Vec<Arc<Compiled>>> = Mutex::new(Vec::new());
const COMPILED_BOUND: usize = 256;

/// The entry of `body` in `list`, if it holds one.
fn find(list: &[Arc<Compiled>], body: &[u8]) -> Option<Arc<Compiled>> {
    (list.iter())
        .find(|known| known.body.len() == body.len() && known.body == body)
        .cloned()
}

impl Server {
    pub(crate) fn new(broker: Arc<Broker>) -> Server {
        // The libraries Redis gives scripts: no io, os, package or debug.
        let libraries = StdLib::STRING | StdLib::TABLE | StdLib::MATH;
        let lua = Lua::new_with(libraries, LuaOptions::default()).expect("the Lua libraries load");
        lua.set_app_data(State {
            keyspace: Keyspace::default(),
            broker,
            now_us: 0,
            raised: None,
        });
        install_redis_library(&lua).expect("the redis library installs");
        Server {
            lua,
            scripts: HashMap::new(),
            known: Vec::new(),
        }
    }

    /// Runs `f` on the key space at `now_us`.
    pub(crate) fn with_keyspace<T>(
        &self,
        now_us: u64,
        f: impl FnOnce(&mut Keyspace, u64) -> T,
    ) -> T {
        let mut state = self
            .lua
            .app_data_mut::<State>()
            .expect("the state is installed");
        state.now_us = now_us;
        f(&mut state.keyspace, now_us / 1000)
    }

    /// Forgets every key and every loaded script, as a server restarted without
    /// persistence has.
    pub(crate) fn restart_empty(&mut self) {
        self.scripts.clear();
        let mut state = self
            .lua
            .app_data_mut::<State>()
            .expect("the state is installed");
        state.keyspace.clear();
    }

    /// A copy of every key, as a replica in sync holds them.
    pub(crate) fn snapshot(&self) -> Keyspace {
        let state = self
            .lua
            .app_data_ref::<State>()
            .expect("the state is installed");
        state.keyspace.clone()
    }

    /// Becomes the promoted replica that held `keyspace`: its keys, and no loaded
    /// script (a replica is sent what scripts did, not the scripts).
    pub(crate) fn fail_over(&mut self, keyspace: &Keyspace) {
        self.scripts.clear();
        let mut state = self
            .lua
            .app_data_mut::<State>()
            .expect("the state is installed");
        state.keyspace = keyspace.clone();
    }

    /// Answers one request (`args[0]` is the command's name) at server time `now_us`.
    pub(crate) fn execute(&mut self, args: &[Vec<u8>], now_us: u64) -> Result<Reply, CommandError> {
        let name = args
            .first()
            .map(|n| n.to_ascii_lowercase())
            .unwrap_or_default();
        // (Only `SCRIPT`'s subcommand is looked at: `EVAL`'s second argument is a whole
        // script, not worth copying.)
        let sub = match name.as_slice() {
            b"script" => args.get(1).map(|a| a.to_ascii_lowercase()),
            _ => None,
        };
        match (name.as_slice(), sub) {
            (b"eval", _) => {
                let body = args.get(1).ok_or_else(|| arity("eval"))?;
                let sha = self.load(body)?;
                self.run(&sha, &args[2..], now_us)
            }
            (b"evalsha", _) => {
                let sha = args.get(1).ok_or_else(|| arity("evalsha"))?;
                self.run(
                    &String::from_utf8_lossy(sha).to_ascii_lowercase(),
                    &args[2..],
                    now_us,
                )
            }
            (b"script", Some(sub)) if sub == b"load" && args.len() == 3 => {
                Ok(Reply::Bulk(self.load(&args[2])?.into_bytes()))
            }
            (b"script", Some(sub)) if sub == b"exists" => Ok(Reply::Array(
                (args[2..].iter())
                    .map(|sha| String::from_utf8_lossy(sha).to_ascii_lowercase())
                    .map(|sha| Reply::Int(self.scripts.contains_key(&sha).into()))
                    .collect(),
            )),
            (b"script", Some(sub)) if sub == b"flush" => {
                self.scripts.clear();
                Ok(Reply::Status("OK"))
            }
            _ => {
                let mut state = self
                    .lua
                    .app_data_mut::<State>()
                    .expect("the state is installed");
                state.now_us = now_us;
                state.command(args)
            }
        }
    }

    /// Compiles `body` (once) and returns its SHA-1.
    fn load(&mut self, body: &[u8]) -> Result<String, CommandError> {
        // Scripts sent whole (`EVAL`) are the same few bodies again and again: they are
        // looked up by the body rather than hashed and compiled each time.
        let compiled = match find(&self.known, body) {
            Some(compiled) => compiled,
            None => {
                let compiled = self.compile(body)?;
                self.known.push(compiled.clone());
                compiled
            }
        };
        if !self.scripts.contains_key(&compiled.sha) {
            let function = (self.lua.load(&compiled.bytecode[..]))
                .set_mode(ChunkMode::Binary)
                .into_function()
                .map_err(|e| error(format!("Error loading compiled script: {e}")))?;
            self.scripts.insert(compiled.sha.clone(), function);
        }
        Ok(compiled.sha.clone())
    }

    /// `body`'s SHA-1 and byte code: from the process's cache, or compiled here.
    fn compile(&self, body: &[u8]) -> Result<Arc<Compiled>, CommandError> {
        let cache = || lock(&COMPILED);
        if let Some(compiled) = find(&cache(), body) {
            return Ok(compiled);
        }
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        let function = (self.lua.load(body))
            .set_name(format!("@user_script:{sha}"))
            .into_function()
            .map_err(|e| error(format!("Error compiling script (new function): {e}")))?;
        let compiled = Arc::new(Compiled {
            body: body.to_vec(),
            sha,
            // Not stripped: error messages keep the script's name and line numbers.
            bytecode: function.dump(false),
        });
        let mut cache = cache();
        if cache.len() < COMPILED_BOUND && find(&cache, body).is_none() {
            cache.push(compiled.clone());
        }
        Ok(compiled)
    }

    /// `EVALSHA sha numkeys key… arg…`, its arguments after the SHA.
    fn run(&mut self, sha: &str, args: &[Vec<u8>], now_us: u64) -> Result<Reply, CommandError> {
        let Some(function) = self.scripts.get(sha).cloned() else {
            return Err(CommandError {
                code: "NOSCRIPT",
                message: "No matching script. Please use EVAL.".into(),
            });
        };
        let (numkeys, rest) = args.split_first().ok_or_else(|| arity("evalsha"))?;
        let numkeys: usize = (std::str::from_utf8(numkeys).ok())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| error("value is not an integer or out of range"))?;
        if numkeys > rest.len() {
            return Err(error("Number of keys can't be greater than number of args"));
        }
        let (keys, argv) = rest.split_at(numkeys);
        {
            let mut state = self
                .lua
                .app_data_mut::<State>()
                .expect("the state is installed");
            state.now_us = now_us;
            state.raised = None;
        }
        let outcome = self.call(&function, keys, argv);
        let raised = (self.lua.app_data_mut::<State>())
            .expect("the state is installed")
            .raised
            .take();
        match outcome {
            Ok(reply) => reply,
            // An error `redis.call` raised comes back as itself, as Redis 7 does.
            Err(_) if raised.is_some() => Err(raised.expect("checked")),
            Err(e) => Err(error(format!("user_script: {e}"))),
        }
    }

    fn call(
        &self,
        function: &Function,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
    ) -> mlua::Result<Result<Reply, CommandError>> {
        let lua = &self.lua;
        let strings = |items: &[Vec<u8>]| -> mlua::Result<Table> {
            lua.create_sequence_from(
                (items.iter())
                    .map(|item| lua.create_string(item))
                    .collect::<mlua::Result<Vec<_>>>()?,
            )
        };
        lua.globals().set("KEYS", strings(keys)?)?;
        lua.globals().set("ARGV", strings(argv)?)?;
        let returned: LuaValue = function.call(())?;
        Ok(reply_of(&returned))
    }
}

impl State {
    fn command(&mut self, args: &[Vec<u8>]) -> Result<Reply, CommandError> {
        let broker = self.broker.clone();
        let mut publish = |channel: &[u8], payload: &[u8]| broker.publish(channel, payload);
        self.keyspace.execute(args, self.now_us, &mut publish)
    }
}

fn error(message: impl Into<String>) -> CommandError {
    CommandError {
        code: "ERR",
        message: message.into(),
    }
}

fn arity(command: &str) -> CommandError {
    error(format!("wrong number of arguments for '{command}' command"))
}

/// The `redis` table scripts call: `call`, `pcall`, `sha1hex`, `error_reply`,
/// `status_reply`, `log` (which logs nothing) and the log levels.
fn install_redis_library(lua: &Lua) -> mlua::Result<()> {
    let redis = lua.create_table()?;
    let command = |raise: bool| {
        lua.create_function(move |lua, args: Variadic<LuaValue>| {
            let args = command_args(&args)?;
            let mut state = lua.app_data_mut::<State>().expect("the state is installed");
            match state.command(&args) {
                Ok(reply) => lua_of(lua, &reply),
                Err(e) if raise => {
                    let text = e.to_string_reply();
                    state.raised = Some(e);
                    Err(mlua::Error::RuntimeError(text))
                }
                Err(e) => {
                    let table = lua.create_table()?;
                    table.set("err", e.to_string_reply())?;
                    Ok(LuaValue::Table(table))
                }
            }
        })
    };
    redis.set("call", command(true)?)?;
    redis.set("pcall", command(false)?)?;
    redis.set(
        "sha1hex",
        lua.create_function(|_, text: mlua::LuaString| {
            Ok(sha1_smol::Sha1::from(&*text.as_bytes())
                .digest()
                .to_string())
        })?,
    )?;
    let reply_table = |field: &'static str| {
        lua.create_function(move |lua, text: mlua::LuaString| {
            let table = lua.create_table()?;
            table.set(field, text)?;
            Ok(table)
        })
    };
    redis.set("error_reply", reply_table("err")?)?;
    redis.set("status_reply", reply_table("ok")?)?;
    redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    for (level, name) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"]
        .iter()
        .enumerate()
    {
        redis.set(*name, level)?;
    }
    lua.globals().set("redis", redis)
}

/// A command's arguments as Redis takes them from Lua: strings as they are, numbers
/// written out (integers without a fraction), nothing else.
fn command_args(args: &[LuaValue]) -> mlua::Result<Vec<Vec<u8>>> {
    if args.is_empty() {
        return Err(mlua::Error::RuntimeError(
            "Please specify at least one argument for this redis lib call".into(),
        ));
    }
    (args.iter())
        .map(|arg| match arg {
            LuaValue::String(text) => Ok(text.as_bytes().to_vec()),
            LuaValue::Integer(n) => Ok(n.to_string().into_bytes()),
            LuaValue::Number(n) => Ok(number_text(*n).into_bytes()),
            _ => Err(mlua::Error::RuntimeError(
                "Lua redis lib command arguments must be strings or integers".into(),
            )),
        })
        .collect()
}

/// A Lua number as Redis writes it into a command (`%.17g`).
fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e17 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A command's reply as a script sees it: integers as numbers, bulk strings as strings,
/// nil as `false`, arrays as tables, a status as `{ok = …}`.
fn lua_of(lua: &Lua, reply: &Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(n) => LuaValue::Number(*n as f64),
        Reply::Bulk(bytes) => LuaValue::String(lua.create_string(bytes)?),
        Reply::Status(text) => {
            let table = lua.create_table()?;
            table.set("ok", *text)?;
            LuaValue::Table(table)
        }
        Reply::Array(items) => {
            let table = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                table.set(i + 1, lua_of(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// A script's return value as Redis replies with it: numbers truncated to integers,
/// `true` as 1, `false` and nil as nil, `{err = …}` as an error, `{ok = …}` as a status,
/// other tables as arrays up to their first nil.
fn reply_of(value: &LuaValue) -> Result<Reply, CommandError> {
    Ok(match value {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(n) => Reply::Int(*n),
        LuaValue::Number(n) => Reply::Int(*n as i64),
        LuaValue::String(text) => Reply::Bulk(text.as_bytes().to_vec()),
        LuaValue::Table(table) => {
            if let Ok(LuaValue::String(text)) = table.raw_get::<LuaValue>("err") {
                return Err(CommandError::raw(text.to_string_lossy()));
            }
            if let Ok(LuaValue::String(_)) = table.raw_get::<LuaValue>("ok") {
                return Ok(Reply::Status("OK"));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(reply_of(&item).unwrap_or(Reply::Nil)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(server: &mut Server, body: &str, key: &str) -> Result<Reply, CommandError> {
        let args = ["eval", body, "1", key].map(|a| a.as_bytes().to_vec());
        server.execute(&args, 1_700_000_000_000_000)
    }

    /// A script compiled once in the process runs the same on another server and after a
    /// restart (which forgets it as loaded), and a runtime error still names the script
    /// and its line.
    #[test]
    fn a_compiled_script_is_the_same_on_every_server() {
        let failing = "redis.call('set', KEYS[1], 'v')\nlocal missing = nil\nreturn missing.field";
        let sha = sha1_smol::Sha1::from(failing).digest().to_string();
        let fine = "redis.call('set', KEYS[1], 'x') return redis.call('get', KEYS[1])";
        let (mut first, mut second) = (Server::new(Arc::default()), Server::new(Arc::default()));
        for server in [&mut first, &mut second] {
            let failed = eval(server, failing, "k").expect_err("nil has no field");
            assert!(
                failed.message.contains(&format!("user_script:{sha}:3:")),
                "{}",
                failed.message
            );
            server.restart_empty();
            let evalsha = ["evalsha", &sha, "1", "k"].map(|a| a.as_bytes().to_vec());
            let forgotten = server.execute(&evalsha, 0).expect_err("a restart forgets");
            assert_eq!(forgotten.code, "NOSCRIPT");
            assert_eq!(eval(server, fine, "n"), Ok(Reply::Bulk(b"x".to_vec())));
        }
    }
}
