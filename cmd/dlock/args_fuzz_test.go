package main

import (
	"io"
	"strings"
	"testing"
)

// FuzzArguments feeds arbitrary arguments to every subcommand's parsing:
// bad input must give a usage error (or help), never a panic. Arguments that
// would make a subcommand act (a valid key and command) are cut short by
// pointing it at a Redis that is not there.
func FuzzArguments(f *testing.F) {
	f.Add("run --key k --wait 0 -- true")
	f.Add("lock --key k --ttl 1ms")
	f.Add("status --json")
	f.Add("extend --key k --token t --ttl -5s")
	f.Add("ls --limit -1 x")
	f.Add("run --key --max-hold 1h")
	f.Add("demo --spawn=maybe extra")
	f.Add("torture --scenario nope")
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		if len(args) == 0 {
			return
		}
		switch args[0] {
		case "demo", "torture", "help":
			return // they run for real: covered by their own tests
		}
		// Never reach a real server, never run a real command.
		args = append(args[:1:1], append([]string{"--redis", "redis://127.0.0.1:1"}, args[1:]...)...)
		for i, a := range args {
			if a == "--" {
				args = append(args[:i+1:i+1], "true")
				break
			}
		}
		_ = dispatch(args, io.Discard, io.Discard)
	})
}
