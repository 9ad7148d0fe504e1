package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
)

// waitFlag is --wait: unset means wait as long as it takes.
type waitFlag struct {
	set bool
	d   time.Duration
}

func (w *waitFlag) String() string {
	if !w.set {
		return ""
	}
	return w.d.String()
}

// Type names what --wait takes, in help.
func (w *waitFlag) Type() string { return "duration" }

func (w *waitFlag) Set(v string) error {
	d, err := parseDuration(v)
	if err != nil {
		return err
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	w.set, w.d = true, d
	return nil
}

// durationValue is a duration flag whose error says what a duration looks
// like (time.ParseDuration's does not suggest a unit).
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Type names what a duration flag takes, in help.
func (d *durationValue) Type() string { return "duration" }

func (d *durationValue) Set(v string) error {
	p, err := parseDuration(v)
	if err != nil {
		return err
	}
	*d = durationValue(p)
	return nil
}

// durationFlag defines a duration flag with durationValue's errors.
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = value
	fs.Var((*durationValue)(p), name, usage)
	return p
}

// parseDuration is time.ParseDuration with an error that says what is
// wrong: a number without a unit, most often.
func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
		return 0, fmt.Errorf("%q needs a unit: %ss, %sms or %sm, for example", v, v, v, v)
	}
	return 0, fmt.Errorf("%q is not a duration (examples: 10s, 500ms, 1m30s)", v)
}

// acquire obtains the lock as --wait says: one try for 0, waiting up to d
// otherwise, waiting until obtained when unset. ctx ends the wait early
// (a signal).
func acquire(ctx context.Context, c *dlock.Client, key string, wait waitFlag, opts ...dlock.Option) (*dlock.Lock, error) {
	try := func(ctx context.Context, opts ...dlock.Option) (*dlock.Lock, error) {
		return c.TryLock(ctx, key, opts...)
	}
	lock := func(ctx context.Context, opts ...dlock.Option) (*dlock.Lock, error) { return c.Lock(ctx, key, opts...) }
	return waitFor(ctx, wait, try, lock, opts)
}

// waitFor is acquire for any kind of lock: try for a --wait of 0, else
// wait (up to --wait, when it is set).
func waitFor(ctx context.Context, wait waitFlag, try, lock func(context.Context, ...dlock.Option) (*dlock.Lock, error), opts []dlock.Option) (*dlock.Lock, error) {
	switch {
	case wait.set && wait.d == 0:
		return try(ctx, opts...)
	case wait.set:
		ctx, cancel := context.WithTimeout(ctx, wait.d)
		defer cancel()
		return lock(ctx, opts...)
	}
	return lock(ctx, opts...)
}

// acquireFailed reports why the lock was not obtained and returns the exit
// code for it.
func acquireFailed(stderr io.Writer, key string, err error, conflict int) int {
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "dlock: interrupted while waiting for %q\n", key)
		return exitInterrupted
	case errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, dlock.ErrNoQuorum):
		// The wait ran out while too few Redlock nodes answered in time.
		fmt.Fprintf(stderr, "dlock: cannot lock %q: no majority of nodes answered before the wait ended: %v\n", key, err)
		return exitRedis
	case errors.Is(err, dlock.ErrNotObtained) && errors.As(err, new(*dlock.NodeError)):
		// The wait ran out while Redis could not be reached.
		fmt.Fprintf(stderr, "dlock: cannot lock %q: Redis could not be reached before the wait ended: %v\n", key, err)
		return exitRedis
	case errors.Is(err, dlock.ErrNotObtained):
		fmt.Fprintf(stderr, "dlock: %q is held by someone else (not obtained)\n", key)
		return conflict
	case errors.Is(err, dlock.ErrInvalidArgument):
		fmt.Fprintf(stderr, "%v\n", err)
		return exitUsage
	case errors.Is(err, dlock.ErrPermitMismatch):
		fmt.Fprintf(stderr, "dlock: %q: %v\n", key, err)
		return exitUsage
	case errors.Is(err, dlock.ErrWrongKind):
		fmt.Fprintf(stderr, "dlock: %q holds another kind of lock (a semaphore's or a plain lock's); use the same --permits as its holders\n", key)
		return exitUsage
	}
	return redisFailed(stderr, "cannot lock", key, err)
}

// redisFailed reports a Redis failure of what on key and returns its exit
// code: 64 for a database number the server does not have (the URL is
// wrong), 69 otherwise. A key that holds something other than a lock is
// said to, instead of quoting a script's error.
func redisFailed(stderr io.Writer, what, key string, err error) int {
	var unreachable *unreachableError
	var qe *dlock.QuorumError
	switch msg := err.Error(); {
	case errors.As(err, &unreachable) && !errors.As(err, &qe):
		// One node: its address and where it came from say it all.
		fmt.Fprintf(stderr, "dlock: %s %q: %v\n", what, key, unreachable)
		return exitRedis
	case strings.Contains(msg, "NOAUTH"):
		fmt.Fprintf(stderr, "dlock: %s %q: %v\n", what, key, err)
		fmt.Fprintln(stderr, "dlock: the server needs a password: give it in its URL, redis://:PASSWORD@HOST:PORT (percent-encode @ : / # ? % in it)")
		return exitRedis
	case errors.Is(err, dlock.ErrInvalidArgument):
		fmt.Fprintln(stderr, err)
		return exitUsage
	case strings.Contains(msg, "DB index is out of range"):
		fmt.Fprintf(stderr, "dlock: the database number in the Redis URL is out of range for this server (%s %q)\n", what, key)
		return exitUsage
	case strings.Contains(msg, "WRONGTYPE") || errors.Is(err, dlock.ErrWrongKind):
		// ErrWrongKind from what takes any kind of lock (Inspect): no
		// lock of dlock's at all.
		fmt.Fprintf(stderr, "dlock: %s %q: the key is not a lock: it holds another kind of value (redis-cli TYPE shows which)\n", what, key)
		return exitRedis
	}
	fmt.Fprintf(stderr, "dlock: %s %q: %v\n", what, key, err)
	return exitRedis
}

// exitCodeOK checks --conflict-exit-code: an exit status is 0-255 (0, for
// a job that another copy running already does, is allowed).
func exitCodeOK(code int) error {
	if code < 0 || code > 255 {
		return fmt.Errorf("--conflict-exit-code must be between 0 and 255, got %d", code)
	}
	return nil
}

// durationOK checks a duration flag that must be positive.
func durationOK(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--%s must be positive, got %v", name, d)
	}
	return nil
}
