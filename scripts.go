package dlock

import (
	_ "embed"

	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wait"
)

// One script per server-side operation, each a file in scripts/ whose
// header names its KEYS and ARGV; Redlock's acquire has internal/wait's
// fence prelude put first, as the line's scripts do. Sent as EVALSHA, and
// as EVAL on NOSCRIPT (transport.Node.Run): loaded once per server, not
// per call. (One node's mutex, semaphore and read-write lock wait in the
// line: internal/wait's scripts, line.go.)
var (
	//go:embed scripts/acquire.lua
	acquireSrc    string
	acquireScript = transport.NewScript(wait.FencePrelude + acquireSrc)

	//go:embed scripts/release.lua
	releaseSrc    string
	releaseScript = transport.NewScript(releaseSrc)

	//go:embed scripts/extend.lua
	extendSrc    string
	extendScript = transport.NewScript(extendSrc)

	//go:embed scripts/shared_extend.lua
	sharedExtendSrc    string
	sharedExtendScript = transport.NewScript(sharedExtendSrc)

	//go:embed scripts/owner.lua
	ownerSrc    string
	ownerScript = transport.NewScript(ownerSrc)
)
