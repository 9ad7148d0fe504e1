-- results: the scripts' named answers (MARKED, WAITED: node.go's leanMarked, leanWaited; a test).
local MARKED, WAITED = -3, 2
local RELEASED, NOT_HELD = 1, 0
