package guard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrStaleFence is matched by the error of a guarded write that was
// refused because the resource has accepted a write with a higher fence:
// the writer's lock was lost, and someone has held it since. Nothing was
// written. Its *StaleFenceError tells the fences.
var ErrStaleFence = errors.New("dlock: stale fence")

// StaleFenceError is a guarded write refused for its fence.
type StaleFenceError struct {
	Resource string // the resource's key (Redis) or table and row (SQL)
	Fence    int64  // the refused write's fence
	Highest  int64  // the highest fence the resource had accepted
}

// Error names the resource, the refused fence and the highest it had accepted.
func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("dlock: stale fence: %s refused fence %d, below the %d it has accepted", e.Resource, e.Fence, e.Highest)
}

// Is makes the error match ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// staleError turns the scripts' refusal into a *StaleFenceError.
func staleError(err error, resource string, fence int64) error {
	if err == nil || !isRedisError(err) {
		return err
	}
	seen, ok := strings.CutPrefix(err.Error(), "DLOCKSTALE ")
	if !ok {
		return err
	}
	highest, _ := strconv.ParseInt(seen, 10, 64)
	return &StaleFenceError{Resource: resource, Fence: fence, Highest: highest}
}

// isRedisError reports whether err is an error reply from the server (as
// opposed to a network or client error).
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
