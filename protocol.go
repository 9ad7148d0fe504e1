package dlock

import (
	"fmt"
	"strconv"
	"strings"
)

// The protocol's version
//
// What dlock keeps on Redis (the lock key's token, the fencing counter and
// its mark, the queue, the waiters' hash and its grant record, the holders'
// fences, the notify key and the wake channel's messages) is one format,
// docs/design.md has it whole, and it has a version: protocolVersion.
// Every token dlock writes ends its random part with "-v" and the version
// ("<27 random characters>-v1", then a campaign's ".value"; a permit's or a
// read-write hold's token starts with its kind). Scripts mark only tokens of
// their own version (scripts/mark.lua), and a Client that meets a token of
// another version (Attach, Inspect) refuses it with ErrProtocol rather than
// mix two formats on one key. A change to the format changes the version.

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
