package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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

func (w *waitFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	w.set, w.d = true, d
	return nil
}

// acquire obtains the lock as --wait says: one try for 0, waiting up to d
// otherwise, waiting until obtained when unset. ctx ends the wait early
// (a signal).
func acquire(ctx context.Context, c *dlock.Client, key string, wait waitFlag, opts ...dlock.Option) (*dlock.Lock, error) {
	switch {
	case wait.set && wait.d == 0:
		return c.TryLock(ctx, key, opts...)
	case wait.set:
		ctx, cancel := context.WithTimeout(ctx, wait.d)
		defer cancel()
		return c.Lock(ctx, key, opts...)
	}
	return c.Lock(ctx, key, opts...)
}

// acquireFailed reports why the lock was not obtained and returns the exit
// code for it.
func acquireFailed(stderr io.Writer, key string, err error, conflict int) int {
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "dlock: interrupted while waiting for %q\n", key)
		return 130
	case errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, dlock.ErrNoQuorum):
		// The wait ran out while too few Redlock nodes answered in time.
		fmt.Fprintf(stderr, "dlock: cannot lock %q: no majority of nodes answered before the wait ended: %v\n", key, err)
		return exitRedis
	case errors.Is(err, dlock.ErrNotObtained):
		fmt.Fprintf(stderr, "dlock: %q is held by someone else (not obtained)\n", key)
		return conflict
	case errors.Is(err, dlock.ErrInvalidArgument):
		fmt.Fprintf(stderr, "%v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "dlock: cannot lock %q: %v\n", key, err)
	return exitRedis
}

// durationOK checks a duration flag that must be positive.
func durationOK(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--%s must be positive, got %v", name, d)
	}
	return nil
}
