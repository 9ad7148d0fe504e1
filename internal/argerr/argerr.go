// Package argerr holds the one error that every dlock package returns for
// bad input, so that dlock.ErrInvalidArgument matches them all.
package argerr

import (
	"errors"
	"fmt"
)

// Err is dlock.ErrInvalidArgument.
var Err = errors.New("dlock: invalid argument")

// New returns an error matching Err with a message that says what was
// wrong.
func New(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{Err}, args...)...)
}
