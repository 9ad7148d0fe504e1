package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

const statusHelp = `
Show whether the lock on KEY is held, for how much longer, and the last
fence issued for it. The holder's token is shown only by its first
characters.

Exit codes: 0 held; 1 not held; 69 Redis unavailable; 64 usage.

Examples:
  dlock status nightly-report
  dlock status --json nightly-report
  if dlock status deploy >/dev/null; then echo "a deploy is running"; fi
`

// statusResult is what status prints with --json.
type statusResult struct {
	Key    string `json:"key"`
	Held   bool   `json:"held"`
	TTLms  int64  `json:"ttl_ms,omitempty"`
	Fence  int64  `json:"fence"`
	Holder string `json:"holder,omitempty"`
}

func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", "[flags] KEY", statusHelp, stderr)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "status: give exactly one KEY")
	}
	key := fs.Arg(0)
	c, _, closeAll, err := rf.connect()
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.Inspect(ctx, key)
	if err != nil {
		fmt.Fprintf(stderr, "dlock: status %q: %v\n", key, err)
		return exitRedis
	}
	switch {
	case *asJSON:
		printJSON(stdout, statusResult{Key: key, Held: st.Held, TTLms: st.TTL.Milliseconds(), Fence: st.Fence, Holder: st.Holder})
	case st.Held:
		ttl := st.TTL.Round(time.Millisecond).String()
		if st.TTL < 0 {
			ttl = "none (set without expiry)"
		}
		fmt.Fprintf(stdout, "%s: held by %s, ttl %s, fence %d\n", key, st.Holder, ttl, st.Fence)
	default:
		fmt.Fprintf(stdout, "%s: free, last fence %d\n", key, st.Fence)
	}
	if !st.Held {
		return exitFree
	}
	return exitOK
}
