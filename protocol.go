package dlock

import (
	"fmt"

	"github.com/dlock-go/dlock/internal/tokens"
)

// The protocol's version: what dlock keeps on Redis is one format
// (docs/design.md, "The format on Redis"), and a change to it changes the
// version. Every token ends its random part with "-v" and the version, and
// a Client refuses another's (ErrProtocol) rather than mix two on one key.

// ErrProtocol is returned when a key holds a token that a dlock speaking
// another version of the format on Redis wrote: two versions must not use
// one key at once. Upgrade every program that locks the key together.
var ErrProtocol = fmt.Errorf("dlock: the key is held under another version of dlock's format on Redis (this one is v%d)", tokens.Version)

// otherVersion returns ErrProtocol, naming the version, when token was
// written by a dlock of another version, and nil otherwise.
func otherVersion(token string) error {
	if v, ok := tokens.VersionOf(token); ok && v != tokens.Version {
		return fmt.Errorf("%w: its holder's is v%d", ErrProtocol, v)
	}
	return nil
}
