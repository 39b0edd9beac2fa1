-- Run once in each worker's Lua state, with the debug library still reachable. It builds what Redis 7.0
-- builds in C (script_lua.c): the error handler that adds a script's source and line, redis.call and
-- redis.pcall over the Rust call, the read-only globals scripts see, and load/loadstring that refuse
-- bytecode. It returns the functions Rust keeps: run, the protected environment and the proxy maker.
-- The run's Rust functions sit in the registry (`fallow.raw_call`, `fallow.raw_acl_check`), and so does
-- the RESP version `redis.setresp` chose (`fallow.resp`). The redis functions that raise errors are
-- returned in `raising` as functions answering (result, failed); Rust wraps each in a C function that
-- raises the error (a Lua function called in tail position would lose the script's line from it).
local rust = ...
local G = _G
local dbg = debug
local setfenv, error, type, tostring, rawget, rawset, next, pcall_ = setfenv, error, type, tostring, rawget, rawset, next, pcall
local setmetatable_, getmetatable_ = setmetatable, getmetatable
local registry = dbg.getregistry()
local function raw_call(...) return registry['fallow.raw_call'](...) end
local function raw_acl_check(...) return registry['fallow.raw_acl_check'](...) end

-- Where an error was raised: the frame that raised it, past C functions (error, redis.call) and this
-- file's own functions (the read-only checks), as Redis looks two levels up, past a C function.
local function locate(err)
  for level = 2, 50 do
    local info = dbg.getinfo(level, 'Sl')
    if not info then break end
    if info.what ~= 'C' and info.what ~= 'tail' and info.source ~= '=bootstrap' then
      err['source'] = info.source
      err['line'] = info.currentline
      return err
    end
  end
  return err
end

local function error_handler(err)
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  return locate(err)
end

-- Errors the redis library raises as Redis's C code does (luaPushError + luaError): a table, returned
-- with `true` for the C wrapper to raise.
local function fail(message) return {err = 'ERR ' .. message}, true end

-- luaPushErrorBuff: "-CODE message" keeps its code, anything else gets ERR; line breaks trimmed.
local function error_text(text)
  if text:sub(1, 1) ~= '-' then text = '-' .. text end
  local body = text:sub(2)
  local space = body:find(' ', 1, true)
  local code, message = 'ERR', body
  if space then code, message = body:sub(1, space - 1), body:sub(space + 1) end
  message = (message:gsub('^[\r\n]+', ''))
  message = (message:gsub('[\r\n]+$', ''))
  return code .. ' ' .. message
end

local redis = {}
redis.pcall = function(...)
  local reply = raw_call(...)
  return reply
end
redis.error_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {err = error_text(text)}
end
redis.status_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = text}
end
local raising = {}
raising.call = raw_call
raising.sha1hex = function(...)
  if select('#', ...) ~= 1 then return fail('wrong number of arguments') end
  return rust.sha1hex(tostring((...))), false
end
raising.setresp = function(...)
  if select('#', ...) ~= 1 then return fail('redis.setresp() requires one argument.') end
  local version = tonumber((...))
  if version ~= 2 and version ~= 3 then return fail('RESP version must be 2 or 3.') end
  registry['fallow.resp'] = version
  return nil, false
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
raising.log = function(...)
  local count = select('#', ...)
  if count < 2 then return fail('redis.log() requires two arguments or more.') end
  local level = ...
  if type(level) ~= 'number' then return fail('First argument must be a number') end
  if level < 0 or level > 3 then return fail('Invalid debug level.') end
  local parts = {}
  for index = 2, count do
    local piece = select(index, ...)
    if type(piece) == 'string' or type(piece) == 'number' then parts[#parts + 1] = tostring(piece) end
  end
  rust.log(level, table.concat(parts, ' '))
  return nil, false
end
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
raising.set_repl = function(...)
  if select('#', ...) ~= 1 then return fail('redis.set_repl() requires one argument.') end
  local flags = tonumber((...))
  if flags == nil or flags < 0 or flags > 3 or flags ~= math.floor(flags) then
    return fail('Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.')
  end
  return nil, false
end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
raising.acl_check_cmd = function(...)
  local allowed, failure = raw_acl_check(...)
  if failure then return failure, true end
  return allowed, false
end
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = rust.version, rust.version_num
G.redis = redis

-- math.random over Redis's own lrand48 state, which every script shares.
local floor, rand_next, rand_seed = math.floor, rust.rand_next, rust.rand_seed
local LRAND48_MAX = 2147483647
local function check_int(value, position)
  local number = tonumber(value)
  if number == nil then
    error("bad argument #" .. position .. " to 'random' (number expected, got " .. type(value) .. ")", 3)
  end
  if number >= 0 then return floor(number) end
  return -floor(-number)
end
math.random = function(...)
  local r = (rand_next() % LRAND48_MAX) / LRAND48_MAX
  local count = select('#', ...)
  if count == 0 then return r end
  if count == 1 then
    local upper = check_int((...), 1)
    if upper < 1 then error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * upper) + 1
  end
  if count == 2 then
    local lower, upper = check_int((...), 1), check_int(select(2, ...), 2)
    if lower > upper then error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (upper - lower + 1)) + lower
  end
  error('wrong number of arguments', 2)
end
math.randomseed = function(seed)
  rand_seed(check_int(seed, 1))
end

-- Globals: reads of unknown names and every write fail, as with Redis's protected _G. Tables the
-- environment hands out (string, math, redis...) are read-only through proxies of their own.
local protected = setmetatable_({}, {__mode = 'k'})
local function readonly_error() error('Attempt to modify a readonly table', 2) end
local function proxy(target)
  local p = {}
  protected[p] = target
  return setmetatable_(p, {
    __index = target,
    __newindex = readonly_error,
    __metatable = false,
  })
end

-- While FUNCTION LOAD runs a library's code, the globals are the library API alone (Redis 7.0 swaps the
-- globals' __index the same way), so the functions it registers see the full globals when they run.
local library_api = nil

local env = {}
local env_meta = {
  __index = function(_, name)
    local value = rawget(library_api or G, name)
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = readonly_error,
}
protected[env] = G
setmetatable_(env, env_meta)

-- Functions that would see through the proxies or change protected tables.
local function target_of(t) return protected[t] or t end
G.next = function(t, k) return next(target_of(t), k) end
local next_ = G.next
G.pairs = function(t) return next_, t, nil end
G.rawget = function(t, k) return rawget(target_of(t), k) end
G.rawset = function(t, k, v)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return rawset(t, k, v)
end
G.setmetatable = function(t, m)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable_(t, m)
end
G.getmetatable = function(t)
  if protected[t] then return nil end
  return getmetatable_(t)
end

local load_, loadstring_ = load, loadstring
local function is_bytecode(chunk) return type(chunk) == 'string' and chunk:byte(1) == 27 end
G.loadstring = function(chunk, name)
  if is_bytecode(chunk) then return nil, 'binary chunks are not allowed' end
  local f, message = loadstring_(chunk, name)
  if f then setfenv(f, env) end
  return f, message
end
G.load = function(reader, name)
  local first = true
  local function text_only()
    local piece = reader()
    if first and is_bytecode(piece) then error('binary chunks are not allowed', 0) end
    first = false
    return piece
  end
  local f, message = load_(text_only, name)
  if f then setfenv(f, env) end
  return f, message
end

-- Runs a script: ok, its result or error, and the RESP version it ended with.
-- Runs a script or function (f with its arguments): ok, its result or error, and the RESP version it
-- ended with.
local function run(f, ...)
  registry['fallow.resp'] = 2
  local count, args = select('#', ...), {...}
  local ok, result = xpcall(function() return f(unpack(args, 1, count)) end, error_handler)
  return ok, result, registry['fallow.resp']
end

-- FUNCTION LOAD: the library API is `redis` with register_function, log and the constants only.
local registered = nil
local known_flags = {}
for _, flag in ipairs({'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}) do
  known_flags[flag] = true
end

local function is_text(value) return type(value) == 'string' or type(value) == 'number' end

local function function_spec(spec)
  local name, callback, flags, description
  for key, value in next, spec do
    if key == 'function_name' then name = value
    elseif key == 'callback' then callback = value
    elseif key == 'flags' then flags = value
    elseif key == 'description' then description = value
    else return nil, 'unknown argument given to redis.register_function' end
  end
  if name == nil then return nil, 'redis.register_function must get a function name argument' end
  if callback == nil then return nil, 'redis.register_function must get a callback argument' end
  if not is_text(name) then return nil, 'function_name argument given to redis.register_function must be a string' end
  if type(callback) ~= 'function' then
    return nil, 'callback argument given to redis.register_function must be a function'
  end
  if description ~= nil and not is_text(description) then
    return nil, 'description argument given to redis.register_function must be a string'
  end
  return {name = tostring(name), callback = callback, flags = flags,
          description = description and tostring(description)}
end

local function check_registration(entry)
  if entry.flags ~= nil then
    if type(entry.flags) ~= 'table' then
      return 'flags argument to redis.register_function must be a table representing function flags'
    end
    local list = {}
    for _, flag in next, entry.flags do
      if type(flag) ~= 'string' or not known_flags[flag] then return 'unknown flag given' end
      list[#list + 1] = flag
    end
    entry.flags = list
  else
    entry.flags = {}
  end
  if not entry.name:match('^[%w_]+$') then
    return 'Library names can only contain letters, numbers, or underscores(_) and must be at least one character long'
  end
  for _, other in ipairs(registered) do
    if other.name == entry.name then return 'Function already exists in the library' end
  end
end

local function register_function(...)
  local count = select('#', ...)
  local entry, message
  if count == 1 then
    local spec = ...
    if type(spec) ~= 'table' then
      return fail('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
    end
    entry, message = function_spec(spec)
  elseif count == 2 then
    local name, callback = ...
    if not is_text(name) then return fail('first argument to redis.register_function must be a string') end
    if type(callback) ~= 'function' then return fail('second argument to redis.register_function must be a function') end
    entry = {name = tostring(name), callback = callback}
  else
    return fail('wrong number of arguments to redis.register_function')
  end
  if entry == nil then return fail(message) end
  message = check_registration(entry)
  if message then return fail(message) end
  registered[#registered + 1] = entry
  return nil, false
end
raising.register_function = register_function

local function protected_api(fields)
  return setmetatable_(fields, {
    __index = function(_, name)
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end,
    __newindex = readonly_error,
    __metatable = false,
  })
end

-- Runs a library's code (f) with the library API: ok, error, and the functions it registered.
local function load_library(f, load_redis)
  registered = {}
  library_api = protected_api({redis = load_redis})
  local ok, err = xpcall(f, error_handler)
  library_api = nil
  local found = registered
  registered = nil
  return ok, err, found
end

-- The library API's redis table (register_function is added by Rust as a raising C function).
local function library_redis(register)
  return protected_api({
    register_function = register, log = redis.log,
    LOG_DEBUG = redis.LOG_DEBUG, LOG_VERBOSE = redis.LOG_VERBOSE, LOG_NOTICE = redis.LOG_NOTICE,
    LOG_WARNING = redis.LOG_WARNING, REDIS_VERSION = redis.REDIS_VERSION,
    REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
  })
end

return run, env, proxy, raising, load_library, library_redis
