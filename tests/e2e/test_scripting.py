"""Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT. Every reply is compared exactly with
Redis 7.0.15's (run with E2E_TARGET=redis to check the expectations against a real server)."""
import threading
import time

import pytest
import redis

from helpers import Err, RawConn

pytestmark = pytest.mark.resp


def sha_of(body: str) -> str:
    import hashlib

    return hashlib.sha1(body.encode()).hexdigest()


def where(body: str, line: int = 1) -> str:
    return f" script: {sha_of(body)}, on @user_script:{line}."


def decoded(reply):
    """Bulk strings as text, errors and everything else as they are."""
    if isinstance(reply, Err):
        return reply
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, list):
        return [decoded(item) for item in reply]
    if isinstance(reply, dict):
        return {decoded(key): decoded(value) for key, value in reply.items()}
    return reply


def cmd(conn, *args):
    return decoded(conn.cmd(*args))


def ev(c, body, *rest):
    return cmd(c, "EVAL", body, *rest) if rest else cmd(c, "EVAL", body, "0")


def test_values_convert_both_ways(c):
    assert ev(c, "return {1,2.5,{3,'a'},nil,4}") == [1, 2, [3, "a"]]
    assert ev(c, "return 3.99") == 3
    assert ev(c, "return -3.99") == -3
    assert ev(c, "return 1e20") == -9223372036854775808
    assert ev(c, "return true") == 1
    assert ev(c, "return false") is None
    assert ev(c, "return nil") is None
    assert ev(c, "return {}") == []
    assert ev(c, "return {a=1}") == []
    assert ev(c, "return {ok='fine'}") == "fine"
    assert ev(c, "return {err='My Error'}") == Err("My Error")
    assert ev(c, "return {err=5}") == []
    assert ev(c, "return {1,{err='inner'},3}") == [1, Err("inner"), 3]
    assert ev(c, "return {double=3.5}") == "3.5"
    assert ev(c, "return {map={a=1}}") == ["a", 1]
    assert ev(c, "return {set={a=true}}") == ["a"]
    assert ev(c, "return {big_number='123'}") == "123"
    assert ev(c, "return {verbatim_string={format='txt',string='hi'}}") == "hi"
    assert ev(c, "return redis.call('get','nokey')") is None
    assert ev(c, "return type(redis.call('get','nokey'))") == "boolean"
    assert ev(c, "redis.call('hset','h1','a','1'); return redis.call('hgetall','h1')") == ["a", "1"]
    assert ev(c, "return redis.call('ping')") == "PONG"
    assert ev(c, "local r = redis.call('set','x','1'); return r.ok") == "OK"


def test_numbers_become_arguments_as_percent_17g(c):
    for lua, stored in [("0.1", "0.10000000000000001"), ("3", "3"), ("1e20", "1e+20"), ("1e17", "1e+17"),
                        ("-0.0", "-0"), ("1/3", "0.33333333333333331"), ("1/0", "inf")]:
        assert ev(c, f"redis.call('set','n',{lua}); return redis.call('get','n')") == stored


def test_keys_and_argv(c):
    assert cmd(c, "EVAL", "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}", "2", "k1", "k2", "a1", "a2") == \
        ["k1", "k2", "a1", 2]
    assert cmd(c, "EVAL", "return 1", "-1") == Err("ERR Number of keys can't be negative")
    assert cmd(c, "EVAL", "return 1", "2", "a") == Err("ERR Number of keys can't be greater than number of args")
    assert cmd(c, "EVAL", "return 1", "abc") == Err("ERR value is not an integer or out of range")
    assert cmd(c, "EVAL", "return 1") == Err("ERR wrong number of arguments for 'eval' command")


def test_resp3_from_scripts(raw):
    c = raw()
    cmd(c, "HELLO", "3")
    cmd(c, "HSET", "h1", "a", "1")
    assert ev(c, "return {double=3.5}") == ("double", "3.5")
    assert ev(c, "return {map={a=1}}") == {"a": 1}
    assert ev(c, "return {big_number='123'}") == 123
    assert ev(c, "return false") is None
    assert ev(c, "redis.setresp(3); return false") is False
    assert ev(c, "redis.setresp(3); return redis.call('hgetall','h1')") == {"a": "1"}
    assert ev(c, "redis.setresp(3); return type(redis.call('get','nokey'))") == "nil"
    assert ev(c, "redis.call('zadd','z1',1.5,'x'); redis.setresp(3); return redis.call('zscore','z1','x').double") == 1
    assert ev(c, "return {verbatim_string={format='txt',string='hi'}}") == "txt:hi"


def test_errors_name_the_script_and_line(c):
    for body, message in [
        ("return redis.call('nosuch')", "ERR Unknown Redis command called from script"),
        ("return redis.call('get')", "ERR Wrong number of args calling Redis command from script"),
        ("error({err='E1 boom'})", "E1 boom"),
        ("error('boom')", "ERR user_script:1: boom"),
        ("error(5)", "ERR user_script:1: 5"),
        ("return x", "ERR user_script:1: Script attempted to access nonexistent global variable 'x'"),
        ("x = 1", "ERR user_script:1: Attempt to modify a readonly table"),
        ("setmetatable(_G, nil)", "ERR Attempt to modify a readonly table"),
        ("return redis.call('set','a',{})", "ERR Lua redis lib command arguments must be strings or integers"),
        ("return redis.call()", "ERR Please specify at least one argument for this redis lib call"),
        ("return redis.call('multi')", "ERR This Redis command is not allowed from script"),
        ("return redis.call('blpop','l',0)", "ERR This Redis command is not allowed from script"),
        ("return redis.call('eval','return 1',0)", "ERR This Redis command is not allowed from script"),
        ("return redis.sha1hex()", "ERR wrong number of arguments"),
        ("redis.setresp(4)", "ERR RESP version must be 2 or 3."),
        ("local function f(n) return 1 + f(n+1) end return f(1)", "ERR user_script:1: stack overflow"),
    ]:
        assert ev(c, body) == Err(message + where(body)), body
    body = "redis.call('set','s','x')\nreturn redis.call('incr','s')"
    assert ev(c, body) == Err("ERR value is not an integer or out of range" + where(body, 2))
    body = "return redis.call('hget','s','f')"
    assert ev(c, body) == Err("WRONGTYPE Operation against a key holding the wrong kind of value" + where(body))
    assert ev(c, "syntax error here") == \
        Err("ERR Error compiling script (new function): user_script:1: '=' expected near 'error'")


def test_pcall_and_reply_helpers(c):
    cmd(c, "SET", "s", "x")
    assert ev(c, "return redis.pcall('incr','s')") == Err("ERR value is not an integer or out of range")
    assert ev(c, "return redis.pcall('nosuch')") == Err("ERR Unknown Redis command called from script")
    assert ev(c, "local r = redis.pcall('incr','s'); return type(r)..r.err") == \
        "tableERR value is not an integer or out of range"
    assert ev(c, "return redis.error_reply('E1')") == Err("ERR E1")
    assert ev(c, "return redis.error_reply('-E1 x')") == Err("E1 x")
    assert ev(c, "return redis.error_reply('My Error')") == Err("My Error")
    assert ev(c, "return redis.status_reply('FINE')") == "FINE"
    assert ev(c, "return redis.sha1hex('')") == "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    assert ev(c, "return {ok='a\\r\\nb'}") == "a  b"


def test_the_sandbox_hides_what_redis_hides(c):
    for name in ["os", "io", "print", "dofile", "loadfile", "debug", "newproxy", "getfenv", "setfenv", "require"]:
        body = f"return type({name})"
        assert ev(c, body) == Err(f"ERR user_script:1: Script attempted to access nonexistent global variable "
                                  f"'{name}'" + where(body)), name
    assert ev(c, "return loadstring('return 1')()") == 1
    assert ev(c, "return loadstring(string.dump(function() return 1 end))") is None
    assert ev(c, "return rawget(_G,'x')") is None
    assert ev(c, "return redis.REDIS_VERSION") == "7.0.15"
    assert ev(c, "return redis.REDIS_VERSION_NUM") == 458767
    assert ev(c, "return {redis.LOG_WARNING, redis.REPL_ALL}") == [3, 3]
    assert ev(c, "return redis.replicate_commands()") == 1
    assert ev(c, "return type(coroutine.running)") == "function"
    body = "string.len = nil"
    assert ev(c, body) == Err("ERR user_script:1: Attempt to modify a readonly table" + where(body))
    assert ev(c, "return string.len('abc')") == 3


def test_globals_do_not_leak_between_scripts(c):
    body = "loadstring('y = 1')()"
    assert ev(c, body) == Err("ERR [string \"y = 1\"]:1: Attempt to modify a readonly table"
                              f" script: {sha_of(body)}, on y = 1:1.")
    body = "return y"
    assert ev(c, body) == Err("ERR user_script:1: Script attempted to access nonexistent global variable 'y'"
                              + where(body))


def test_evalsha_and_the_script_cache(c):
    body = "return 'cached'"
    sha = sha_of(body)
    assert cmd(c, "EVALSHA", sha, "0") == Err("NOSCRIPT No matching script. Please use EVAL.")
    assert cmd(c, "SCRIPT", "LOAD", body) == sha
    assert cmd(c, "SCRIPT", "EXISTS", sha, sha.upper(), "0" * 40) == [1, 1, 0]
    assert cmd(c, "EVALSHA", sha.upper(), "0") == "cached"
    assert cmd(c, "EVALSHA_RO", sha, "0") == "cached"
    assert cmd(c, "EVALSHA", "abc", "0") == Err("NOSCRIPT No matching script. Please use EVAL.")
    assert cmd(c, "SCRIPT", "FLUSH", "x") == Err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
    assert cmd(c, "SCRIPT", "FLUSH", "ASYNC") == "OK"
    assert cmd(c, "SCRIPT", "EXISTS", sha) == [0]
    assert ev(c, body) == "cached"
    assert cmd(c, "SCRIPT", "EXISTS", sha) == [1], "EVAL caches what it runs"
    assert cmd(c, "SCRIPT", "LOAD", "syntax error here") == \
        Err("ERR Error compiling script (new function): user_script:1: '=' expected near 'error'")
    assert cmd(c, "SCRIPT", "EXISTS") == Err("ERR wrong number of arguments for 'script|exists' command")
    assert cmd(c, "SCRIPT", "NOSUCH") == Err("ERR unknown subcommand 'NOSUCH'. Try SCRIPT HELP.")
    assert cmd(c, "SCRIPT", "KILL") == Err("NOTBUSY No scripts in execution right now.")
    assert cmd(c, "SCRIPT", "HELP")[0] == "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"


def test_read_only_scripts_refuse_writes(c):
    body = "return redis.call('set','a','1')"
    assert cmd(c, "EVAL_RO", body, "0") == Err("ERR Write commands are not allowed from read-only scripts."
                                              + where(body))
    assert cmd(c, "EVAL_RO", "return redis.pcall('set','a','1')", "0") == \
        Err("ERR Write commands are not allowed from read-only scripts.")
    cmd(c, "SET", "a", "v")
    assert cmd(c, "EVAL_RO", "return redis.call('get',KEYS[1])", "1", "a") == "v"


def test_scripts_check_acl_permissions(raw):
    c = raw()
    assert cmd(c, "ACL", "SETUSER", "scripter", "on", "nopass", "+eval", "+get", "~*") == "OK"
    assert cmd(c, "AUTH", "scripter", "x") == "OK"
    body = "return redis.call('set','a','1')"
    assert ev(c, body) == Err("ERR The user executing the script can't run this command or subcommand" + where(body))
    assert ev(c, "return redis.acl_check_cmd('set','a','1')") is None
    assert ev(c, "return redis.acl_check_cmd('get','a')") == 1
    body = "return redis.acl_check_cmd('nosuch')"
    assert ev(c, body) == Err("ERR Invalid command passed to redis.acl_check_cmd()" + where(body))
    admin = raw()
    assert cmd(admin, "ACL", "DELUSER", "scripter") == 1


def test_select_inside_a_script_stays_inside(c):
    assert cmd(c, "SELECT", "2") == "OK"
    assert ev(c, "redis.call('select', 1); return redis.call('set','dbk','1')") == "OK"
    assert cmd(c, "EXISTS", "dbk") == 0
    assert cmd(c, "SELECT", "1") == "OK"
    assert cmd(c, "EXISTS", "dbk") == 1
    cmd(c, "DEL", "dbk")
    cmd(c, "SELECT", "0")


def test_eval_inside_multi(c):
    assert cmd(c, "MULTI") == "OK"
    assert cmd(c, "EVAL", "return redis.call('incr',KEYS[1])", "1", "m") == "QUEUED"
    assert cmd(c, "INCR", "m") == "QUEUED"
    assert cmd(c, "EVAL", "return redis.call('incr','undeclared')", "0") == "QUEUED"
    assert cmd(c, "EXEC") == [1, 2, 1]


def test_scripts_reach_undeclared_keys(c):
    # kombu and rq build key names inside Lua: by default a script may touch any key.
    body = "for i = 1, 20 do redis.call('set', ARGV[1] .. i, i) end return redis.call('get', ARGV[1] .. 7)"
    for _ in range(3):
        assert cmd(c, "EVAL", body, "0", "u:") == "7"
    declared = "return redis.call('incr', KEYS[1])"
    for n in range(1, 4):
        assert cmd(c, "EVAL", declared, "1", "d") == n
    body = "redis.call('incr', KEYS[1]); return redis.call('keys', 'u:1*')"
    assert sorted(cmd(c, "EVAL", body, "1", "d")) == ["u:1", "u:10", "u:11", "u:12", "u:13", "u:14", "u:15",
                                                      "u:16", "u:17", "u:18", "u:19"]


def test_math_random_is_redis_lrand48(c):
    values = [float(ev(c, "return tostring(math.random())")) for _ in range(3)]
    assert all(0 <= value < 1 for value in values)
    assert ev(c, "math.randomseed(5); return {math.random(1000), math.random(1000)}") == [525, 273]
    assert ev(c, "return math.random(1000)") == 789, "the sequence goes on across scripts"
    assert ev(c, "return math.random(1, 1)") == 1


def test_a_busy_script_answers_others_busy_until_killed(server, raw):
    admin = raw()
    assert cmd(admin, "CONFIG", "SET", "busy-reply-threshold", "200") == "OK"
    try:
        runner = raw(timeout=20)
        body = "local i = 0 while true do i = i + 1 end"
        result = {}

        def run():
            result["reply"] = cmd(runner, "EVAL", body, "0")

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.6)
        other = raw()
        assert cmd(other, "GET", "anything") == \
            Err("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
        assert cmd(other, "SCRIPT", "KILL") == "OK"
        thread.join(10)
        assert result["reply"] == Err("ERR Script killed by user with SCRIPT KILL..." + where(body))
        assert cmd(other, "GET", "anything") is None
    finally:
        cmd(admin, "CONFIG", "SET", "busy-reply-threshold", "5000")


def test_a_script_that_wrote_is_unkillable(server, raw):
    admin = raw()
    assert cmd(admin, "CONFIG", "SET", "busy-reply-threshold", "100") == "OK"
    try:
        runner = raw(timeout=20)
        body = "redis.call('set','w','1') local t = redis.call('time') local s = tonumber(t[1]) " \
               "while true do local n = redis.call('time') if tonumber(n[1]) - s >= 2 then break end end return 1"
        result = {}
        thread = threading.Thread(target=lambda: result.update(reply=cmd(runner, "EVAL", body, "0")))
        thread.start()
        time.sleep(0.5)
        other = raw()
        assert cmd(other, "SCRIPT", "KILL").startswith("UNKILLABLE Sorry the script already executed write commands")
        thread.join(10)
        assert result["reply"] == 1
    finally:
        cmd(admin, "CONFIG", "SET", "busy-reply-threshold", "5000")


def test_redis_py_lock_holds_and_releases(r):
    lock = r.lock("resource", timeout=5)
    assert lock.acquire(blocking=False)
    assert not r.lock("resource", timeout=5).acquire(blocking=False)
    assert lock.extend(5)
    lock.release()
    assert r.lock("resource", timeout=5).acquire(blocking=False)


def test_script_objects_of_redis_py(r):
    incr_by = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    assert incr_by(keys=["counter"], args=[5]) == 5
    r.script_flush()
    assert incr_by(keys=["counter"], args=[2]) == 7, "redis-py reloads after NOSCRIPT"


@pytest.mark.fallow_only
def test_sandbox_escapes_are_stopped_and_memory_is_bounded(server, raw):
    c = raw(timeout=30)
    body = "return string.rep('x', 2^30) .. string.rep('y', 2^30)"
    reply = ev(c, body)
    assert isinstance(reply, Err) and "not enough memory" in reply
    body = "local t = {} for i = 1, 1e9 do t[i] = i end return #t"
    reply = ev(c, body)
    assert isinstance(reply, Err) and "not enough memory" in reply
    assert ev(c, "return os.execute('true')").startswith("ERR user_script:1: Script attempted to access")
    assert ev(c, "return load(function() return string.dump(function() end) end)") is None
    assert ev(c, "return 1") == 1, "the server keeps serving"


@pytest.mark.fallow_only
def test_strict_mode_refuses_undeclared_keys(raw):
    c = raw()
    assert cmd(c, "CONFIG", "SET", "lua-strict-keys", "yes") == "OK"
    try:
        assert cmd(c, "EVAL", "return redis.call('incr', KEYS[1])", "1", "k") == 1
        body = "return redis.call('incr', 'other')"
        assert cmd(c, "EVAL", body, "1", "k") == \
            Err("ERR script accessed key 'other' that is not in KEYS (lua-strict-keys is on)" + where(body))
    finally:
        cmd(c, "CONFIG", "SET", "lua-strict-keys", "no")


@pytest.mark.fallow_only
def test_commands_on_other_shards_run_beside_a_long_script(raw):
    admin = raw()
    assert cmd(admin, "CONFIG", "SET", "busy-reply-threshold", "60000") == "OK"
    runner = raw(timeout=20)
    body = "local t = redis.call('time') local s = tonumber(t[1]) * 1e6 + tonumber(t[2]) " \
           "while true do local n = redis.call('time') " \
           "if tonumber(n[1]) * 1e6 + tonumber(n[2]) - s >= 700000 then break end end " \
           "return redis.call('incr', KEYS[1])"
    try:
        assert cmd(runner, "EVAL", body, "1", "slow") == 1, "the first run learns the script keeps to KEYS"
        result = {}
        thread = threading.Thread(target=lambda: result.update(reply=cmd(runner, "EVAL", body, "1", "slow")))
        thread.start()
        time.sleep(0.2)
        other = raw()
        assert cmd(other, "SET", "elsewhere", "1") == "OK"
        assert thread.is_alive(), "a key on another shard was served while the script ran"
        assert cmd(other, "GET", "slow") == "2", "a command on the script's shard waited for it"
        thread.join(10)
        assert result.get("reply") == 2
    finally:
        cmd(admin, "CONFIG", "SET", "busy-reply-threshold", "5000")


LIBRARY = ("#!lua name=mylib\n"
           "redis.register_function('myfunc', function(keys, args) return {keys[1], args[1]} end)\n"
           "redis.register_function{function_name='ro', callback=function(keys, args) "
           "return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads'}")


def by_name(libraries):
    """FUNCTION LIST with each library's functions in name order (Redis lists them in its dict's order)."""
    for library in libraries:
        library[5] = sorted(library[5], key=lambda function: function[1])
    return libraries


def test_functions_load_list_and_call(c):
    assert cmd(c, "FUNCTION", "FLUSH") == "OK"
    assert cmd(c, "FUNCTION", "LOAD", LIBRARY) == "mylib"
    assert cmd(c, "FUNCTION", "LOAD", LIBRARY) == Err("ERR Library 'mylib' already exists")
    assert cmd(c, "FUNCTION", "LOAD", "REPLACE", LIBRARY) == "mylib"
    assert cmd(c, "FUNCTION", "LOAD", "X", LIBRARY) == Err("ERR Unknown option given: X")
    assert cmd(c, "FCALL", "myfunc", "1", "k", "a") == ["k", "a"]
    assert cmd(c, "FCALL_RO", "myfunc", "1", "k", "a") == \
        Err("ERR Can not execute a script with write flag using *_ro command.")
    c.cmd("SET", "k", "v")
    assert cmd(c, "FCALL_RO", "ro", "1", "k") == "v"
    assert cmd(c, "FCALL", "nosuch", "0") == Err("ERR Function not found")
    assert cmd(c, "FCALL", "myfunc", "2", "k") == Err("ERR Number of keys can't be greater than number of args")
    listed = [["library_name", "mylib", "engine", "LUA", "functions",
               [["name", "myfunc", "description", None, "flags", []],
                ["name", "ro", "description", "reads", "flags", ["no-writes"]]]]]
    assert by_name(cmd(c, "FUNCTION", "LIST")) == listed
    assert by_name(cmd(c, "FUNCTION", "LIST", "LIBRARYNAME", "my*")) == listed
    assert cmd(c, "FUNCTION", "LIST", "LIBRARYNAME", "other*") == []
    assert by_name(cmd(c, "FUNCTION", "LIST", "WITHCODE")) == [listed[0] + ["library_code", LIBRARY]]
    assert cmd(c, "FUNCTION", "LIST", "x") == Err("ERR Unknown argument x")
    assert cmd(c, "FUNCTION", "LIST", "LIBRARYNAME") == Err("ERR library name argument was not given")
    assert cmd(c, "FUNCTION", "STATS") == ["running_script", None, "engines",
                                           ["LUA", ["libraries_count", 1, "functions_count", 2]]]
    assert cmd(c, "FUNCTION", "KILL") == Err("NOTBUSY No scripts in execution right now.")
    assert cmd(c, "FUNCTION", "DELETE", "mylib") == "OK"
    assert cmd(c, "FUNCTION", "DELETE", "mylib") == Err("ERR Library not found")
    assert cmd(c, "FCALL", "myfunc", "0") == Err("ERR Function not found")
    assert cmd(c, "FUNCTION", "FLUSH", "x") == Err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
    assert cmd(c, "FUNCTION", "HELP")[0] == "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"


def test_function_libraries_are_checked_as_redis_checks_them(c):
    cmd(c, "FUNCTION", "FLUSH")
    assert cmd(c, "FUNCTION", "LOAD", LIBRARY) == "mylib"
    lua_error = "ERR Error registering functions: ERR "
    for code, error in [
        ("return 1", "ERR Missing library metadata"),
        ("#!lua\nreturn 1", "ERR Library name was not given"),
        ("#!lua name=bad\nreturn 1", "ERR No functions registered"),
        ("#!lua name=bad\nredis.call('set','x','1')",
         lua_error + "user_function:2: Script attempted to access nonexistent global variable 'call'"),
        ("#!lua name=bad\nredis.register_function('a', function() end)\nredis.register_function('a', function() end)",
         lua_error + "Function already exists in the library"),
        ("#!lua name=bad\nredis.register_function('myfunc', function() end)", "ERR Function myfunc already exists"),
        ("#!lua name=bad\nredis.register_function('f x', function() end)",
         lua_error + "Library names can only contain letters, numbers, or underscores(_) and must be at least "
                     "one character long"),
        ("#!foo name=bad\nredis.register_function('f', function() end)", "ERR Engine 'foo' not found"),
        ("#!lua name=bad x=y\nredis.register_function('f', function() end)", "ERR Invalid metadata value given: x=y"),
        ("#!lua name=bad\nredis.register_function{function_name='f', callback=function() end, flags={'bogus'}}",
         lua_error + "unknown flag given"),
        ("#!lua name=bad\nredis.register_function('f', 'notafunction')",
         lua_error + "second argument to redis.register_function must be a function"),
        ("#!lua name=bad\nredis.register_function{function_name='f'}",
         lua_error + "redis.register_function must get a callback argument"),
        ("#!lua name=bad\nfoo = 1\nredis.register_function('f', function() end)",
         lua_error + "user_function:2: Attempt to modify a readonly table"),
        ("#!lua name=bad\nlocal s = string.format('%d', 1)\nredis.register_function('f', function() end)",
         lua_error + "user_function:2: Script attempted to access nonexistent global variable 'string'"),
        ("#!lua name=bad\nsyntax error here", "ERR Error compiling function: user_function:2: '=' expected near 'error'"),
        ("#!lua name=bad\nwhile true do end", lua_error + "FUNCTION LOAD timeout"),
    ]:
        assert cmd(c, "FUNCTION", "LOAD", code) == Err(error), code
    assert cmd(c, "FUNCTION", "STATS")[3] == ["LUA", ["libraries_count", 1, "functions_count", 2]]


def test_function_errors_name_the_function_and_line(c):
    cmd(c, "FUNCTION", "FLUSH")
    code = ("#!lua name=errs\n"
            "redis.register_function('f3', function(keys, args) return x end)\n"
            "redis.register_function('f4', function(keys, args) error('boom') end)\n"
            "redis.register_function('f5', function(keys, args) return redis.call('nosuch') end)\n"
            "redis.register_function('f6', function(keys, args) return KEYS end)\n"
            "redis.register_function{function_name='f7', callback=function(keys, args) "
            "return redis.call('set', keys[1], 'v') end, flags={'no-writes'}}\n")
    assert cmd(c, "FUNCTION", "LOAD", code) == "errs"
    assert cmd(c, "FCALL", "f3", "0") == \
        Err("ERR user_function:2: Script attempted to access nonexistent global variable 'x' script: f3, "
            "on @user_function:2.")
    assert cmd(c, "FCALL", "f4", "0") == Err("ERR user_function:3: boom script: f4, on @user_function:3.")
    assert cmd(c, "FCALL", "f5", "0") == \
        Err("ERR Unknown Redis command called from script script: f5, on @user_function:4.")
    ev(c, "return 1", "1", "leftover")
    assert cmd(c, "FCALL", "f6", "0") == \
        Err("ERR user_function:5: Script attempted to access nonexistent global variable 'KEYS' script: f6, "
            "on @user_function:5.")
    assert cmd(c, "FCALL", "f7", "1", "k") == \
        Err("ERR Write commands are not allowed from read-only scripts. script: f7, on @user_function:6.")


def test_eval_shebang_flags(c):
    body = "#!lua flags=no-writes\nreturn redis.call('set','a','1')"
    assert ev(c, body) == Err("ERR Write commands are not allowed from read-only scripts." + where(body, 2))
    body = "#!lua\nerror('x')"
    assert ev(c, body) == Err("ERR user_script:2: x" + where(body, 2))
    assert ev(c, "#!lua flags=bogus\nreturn 1") == Err("ERR Unexpected flag in script shebang: bogus")
    assert ev(c, "#!lua name=x\nreturn 1") == Err("ERR Unknown lua shebang option: name=x")
    assert ev(c, "#!luax\nreturn 1") == Err("ERR Unexpected engine in script shebang: #!luax")
    assert ev(c, "#!lua\nreturn 1") == 1
    assert cmd(c, "EVAL_RO", "#!lua\nreturn redis.call('get','a')", "0") == \
        Err("ERR Can not execute a script with write flag using *_ro command.")
    assert cmd(c, "EVAL_RO", "#!lua flags=no-writes\nreturn redis.call('get','a')", "0") is None
