package dlock

import (
	_ "embed"
	"strings"

	"github.com/dlock-go/dlock/internal/transport"
)

// One script per server-side operation, each a file in scripts/ whose
// header names its KEYS and ARGV, with the shared files it needs prepended
// (results, token, fence, again, mark), or, for a lean script's
// slow path, put where it begins (slowPath). Sent as EVALSHA, and as EVAL
// on NOSCRIPT (transport.Node.Run): loaded once per server, not per call.
var (
	//go:embed scripts/results.lua
	resultsSrc string

	//go:embed scripts/token.lua
	tokenSrc string

	//go:embed scripts/fence.lua
	fenceSrc string

	//go:embed scripts/again.lua
	againSrc string

	//go:embed scripts/mark.lua
	markSrc string

	//go:embed scripts/acquire_lean.lua
	acquireLeanSrc    string
	acquireLeanScript = transport.NewScript(resultsSrc + fenceSrc + slowPath(acquireLeanSrc, tokenSrc+againSrc))

	//go:embed scripts/acquire.lua
	acquireSrc    string
	acquireScript = transport.NewScript(resultsSrc + tokenSrc + fenceSrc + againSrc + markSrc + acquireSrc)

	//go:embed scripts/release.lua
	releaseSrc    string
	releaseScript = transport.NewScript(resultsSrc + tokenSrc + markSrc + releaseSrc)

	//go:embed scripts/release_lean.lua
	releaseLeanSrc    string
	releaseLeanScript = transport.NewScript(resultsSrc + slowPath(releaseLeanSrc, tokenSrc))

	//go:embed scripts/extend.lua
	extendSrc    string
	extendScript = transport.NewScript(resultsSrc + tokenSrc + extendSrc)

	//go:embed scripts/shared_extend.lua
	sharedExtendSrc    string
	sharedExtendScript = transport.NewScript(resultsSrc + sharedExtendSrc)

	//go:embed scripts/owner.lua
	ownerSrc    string
	ownerScript = transport.NewScript(ownerSrc)
)

// slowPath puts shared in a lean script at its mark, where its slow path
// begins: a declared function is built on every run, and the fast path
// above the mark returns without building shared.
func slowPath(src, shared string) string {
	const mark = "-- (the slow path's functions: scripts.go)"
	if strings.Count(src, mark) != 1 {
		panic("dlock: a lean script without its slow path's mark")
	}
	return strings.Replace(src, mark, shared, 1)
}
