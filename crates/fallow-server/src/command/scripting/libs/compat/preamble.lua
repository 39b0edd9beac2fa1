local function ser(v, depth)
  depth = depth or 0
  local t = type(v)
  if t == 'string' then return string.format('%q', v) end
  if t == 'number' then return string.format('%.17g', v) end
  if t == 'nil' or t == 'boolean' then return tostring(v) end
  if v == cjson.null then return 'NULL' end
  if t == 'table' then
    if depth > 40 then return '{...}' end
    local parts = {}
    for k, x in pairs(v) do parts[#parts + 1] = ser(k, depth + 1) .. '=' .. ser(x, depth + 1) end
    table.sort(parts)
    return '{' .. table.concat(parts, ',') .. '}'
  end
  return t
end
local function show(...)
  local out = {}
  for i = 1, select('#', ...) do out[#out + 1] = ser((select(i, ...))) end
  return table.concat(out, ' ')
end
local function try(f, ...)
  local r = { pcall(f, ...) }
  if r[1] then return 'OK ' .. show(unpack(r, 2, table.maxn(r))) end
  return 'ERR ' .. tostring(r[2])
end
local function hex(s)
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end
local function deep(n, key, leaf)
  local root = {}
  local cur = root
  for _ = 2, n do
    local nxt = {}
    cur[key] = nxt
    cur = nxt
  end
  if leaf ~= nil then cur[key] = leaf end
  return root
end
local function range(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return t
end
