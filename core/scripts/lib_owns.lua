-- owns: does lease value v belong to token tok? (v is tok or "tok|metadata")
local function owns(v, tok)
  return v and (v == tok or string.sub(v, 1, #tok + 1) == tok .. '|')
end
