package redistest

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Info returns one section of INFO as field -> value (empty if the server
// does not answer within a second).
func Info(rdb *redis.Client, section string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out := map[string]string{}
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// CommandCalls is how many times the server has run the command cmd (as
// INFO commandstats names it: lower case, "script|load"); 0 if unknown.
func CommandCalls(rdb *redis.Client, cmd string) int {
	stat := Info(rdb, "commandstats")["cmdstat_"+cmd]
	calls, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
	n, _ := strconv.Atoi(calls)
	return n
}

// ConnectedClients returns the server's connected_clients (its own
// connection included), 0 if it does not answer.
func ConnectedClients(rdb *redis.Client) int {
	n, _ := strconv.Atoi(Info(rdb, "clients")["connected_clients"])
	return n
}

// ScriptRuns is how many scripts the server has run: EVALSHA and EVAL
// calls, less the EVALSHAs refused with NOSCRIPT (the script then comes
// again as an EVAL).
func ScriptRuns(rdb *redis.Client) int {
	stat := Info(rdb, "errorstats")["errorstat_NOSCRIPT"]
	count, _, _ := strings.Cut(strings.TrimPrefix(stat, "count="), ",")
	noscript, _ := strconv.Atoi(count)
	return CommandCalls(rdb, "evalsha") + CommandCalls(rdb, "eval") - noscript
}
