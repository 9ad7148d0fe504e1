package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// redis is one embedded miniredis, called in-process (no connection, no
// goroutine per request) on the simulated clock: its TIME and TTLs follow
// SetTime (ClockTTL). PUBLISH, from the scripts too, is captured in wakes.
type redis struct {
	m     *miniredis.Miniredis
	wakes []string // messages published by the command being run
}

var epoch0 = time.Unix(1_800_000_000, 0)

func newRedis() *redis {
	r := &redis{m: miniredis.NewMiniRedis()}
	conn, err := r.m.Dial() // starts the server without a listener
	if err != nil {
		panic(err)
	}
	conn.Close()
	r.m.ClockTTL(true)
	r.m.SetTime(epoch0)
	r.m.Server().SetPreHook(func(p *server.Peer, cmd string, args ...string) bool {
		if cmd != "PUBLISH" || len(args) != 2 {
			return false
		}
		r.wakes = append(r.wakes, args[1])
		p.WriteInt(0)
		return true
	})
	return r
}

// do runs one command at simulated time now and returns its reply.
func (r *redis) do(now time.Duration, args ...string) any {
	r.m.SetTime(epoch0.Add(now))
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	r.m.Server().Dispatch(server.NewPeer(w), args)
	w.Flush()
	v, err := server.ParseReply(bufio.NewReader(&buf))
	if err != nil {
		panic(fmt.Sprintf("%v: %v", args[0], err))
	}
	return v
}

// eval runs a script and returns its reply.
func (r *redis) eval(now time.Duration, script string, keys []string, argv []string) any {
	args := append([]string{"EVAL", script, strconv.Itoa(len(keys))}, keys...)
	return r.do(now, append(args, argv...)...)
}

// get is key's value, "" when it does not exist.
func (r *redis) get(now time.Duration, key string) string {
	s, _ := r.do(now, "GET", key).(string)
	return s
}

// pttl is key's PTTL: -2 when it does not exist, -1 when it never expires.
func (r *redis) pttl(now time.Duration, key string) time.Duration {
	n, _ := r.do(now, "PTTL", key).(int)
	if n < 0 {
		return time.Duration(n)
	}
	return time.Duration(n) * time.Millisecond
}
