-- A table-heavy Lua script; prints figures that must match with and without kennel.
local t = {}
for i = 1, 200000 do
  t[i] = { id = i, name = "item" .. i, tags = { i % 3, i % 5, i % 7 } }
end
local index = {}
for _, v in ipairs(t) do index[v.name] = v end
local sum = 0
for i = 1, 200000, 7 do sum = sum + index["item" .. i].id end
local parts = {}
for i = 1, 50000 do parts[#parts + 1] = string.rep("x", i % 50) .. tostring(i) end
local joined = table.concat(parts, ",")
t, index = nil, nil
collectgarbage()
print(sum, #joined, collectgarbage("count") > 0)
