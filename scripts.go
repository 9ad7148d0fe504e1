package dlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// One script per server-side operation, each a file in scripts/ whose header
// names its KEYS and ARGV. Script.Run sends EVALSHA and falls back to EVAL
// when the server answers NOSCRIPT, so a script is loaded once per server,
// not per call.
var (
	//go:embed scripts/acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed scripts/release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed scripts/extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

	//go:embed scripts/inspect.lua
	inspectSrc    string
	inspectScript = redis.NewScript(inspectSrc)
)
