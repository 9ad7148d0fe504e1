package dlock

import (
	"fmt"
	"strconv"
	"strings"
)

// The protocol's version: what dlock keeps on Redis is one format
// (docs/design.md, "The format on Redis"), and a change to it changes the
// version. Every token ends its random part with "-v" and the version;
// scripts mark only their own version's tokens (scripts/mark.lua), and a
// Client refuses another's (ErrProtocol) rather than mix two on one key.

// protocolVersion is the version of the format dlock keeps on Redis.
const protocolVersion = 1

// versionTag ends the random part of every token of this version.
var versionTag = "-v" + strconv.Itoa(protocolVersion)

// ErrProtocol is returned when a key holds a token that a dlock speaking
// another version of the format on Redis wrote: two versions must not use
// one key at once. Upgrade every program that locks the key together.
var ErrProtocol = fmt.Errorf("dlock: the key is held under another version of dlock's format on Redis (this one is v%d)", protocolVersion)

// tokenVersion returns the protocol version of a token dlock wrote, and
// false for a value of any other shape (a key set by hand).
func tokenVersion(token string) (int, bool) {
	if shared(token) {
		if i := strings.Index(token[1:], "~"); i >= 0 {
			token = token[i+2:]
		}
	}
	id, _, _ := strings.Cut(token, ".")
	if len(id) < 30 || id[27] != '-' || id[28] != 'v' {
		return 0, false
	}
	for i := range 27 {
		if !urlSafe[id[i]] {
			return 0, false
		}
	}
	v, err := strconv.Atoi(id[29:])
	return v, err == nil && v > 0
}

// otherVersion returns ErrProtocol, naming the version, when token was
// written by a dlock of another version, and nil otherwise.
func otherVersion(token string) error {
	if v, ok := tokenVersion(token); ok && v != protocolVersion {
		return fmt.Errorf("%w: its holder's is v%d", ErrProtocol, v)
	}
	return nil
}
