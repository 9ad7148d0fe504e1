// Package tokens is the format of the tokens dlock writes as lock values
// (docs/design.md, "The format on Redis"): an optional kind, 160 random
// bits as URL-safe base64, "-v" and the protocol's version, and an
// election's value after '.'.
//
//	[~s<permits>~ | ~r~ | ~w~] <27 characters> -v1 [.<value, base64>]
package tokens

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Version is the version of the format dlock keeps on Redis: a change to
// the format changes it.
const Version = 1

// Kind prefixes of shared tokens; a semaphore's is "~s<permits>~".
const (
	Read  = "~r~"
	Write = "~w~"
)

// versionTag ends the random part of every token of this version.
var versionTag = "-v" + strconv.Itoa(Version)

// New returns a fresh token: kind (a shared hold's prefix, or ""), 160
// random bits from crypto/rand (the Redis guidance's 20 bytes), the
// version, and value when withValue (an election's candidate). Built on
// the stack: one allocation, the string.
func New(kind string, value string, withValue bool) (string, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dlock: reading random token: %w", err)
	}
	t := append(make([]byte, 0, 64), kind...)
	t = base64.RawURLEncoding.AppendEncode(t, b[:])
	t = append(t, versionTag...)
	if withValue {
		t = append(t, '.')
		t = base64.RawURLEncoding.AppendEncode(t, []byte(value))
	}
	return string(t), nil
}

// Shared reports whether t is a semaphore permit's or a read-write hold's.
func Shared(t string) bool { return strings.HasPrefix(t, "~") }

// split returns t's kind prefix ("" for a mutex) and the rest.
func split(t string) (kind, rest string) {
	if Shared(t) {
		if i := strings.Index(t[1:], "~"); i >= 0 {
			return t[:i+2], t[i+2:]
		}
	}
	return "", t
}

// Redact keeps enough of a token to tell it apart in a log (its kind and
// six characters of its random part), not to use it.
func Redact(t string) string {
	kind, t := split(t)
	if len(t) <= 6 {
		return kind + "…"
	}
	return kind + t[:6] + "…"
}

// VersionOf returns the version of a token dlock wrote, and false for a
// value of any other shape (a key set by hand).
func VersionOf(t string) (int, bool) {
	_, t = split(t)
	id, _, _ := strings.Cut(t, ".")
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

// urlSafe tells the bytes of URL-safe base64 text.
var urlSafe = func() (t [256]bool) {
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" {
		t[c] = true
	}
	return t
}()

// Value returns the value an election's token carries, and false for a
// token that carries none.
func Value(t string) (string, bool) {
	_, enc, ok := strings.Cut(t, ".")
	if !ok {
		return "", false
	}
	v, err := base64.RawURLEncoding.DecodeString(enc)
	return string(v), err == nil
}

// Primitive names what a token was granted for, in the vocabulary of
// Status.Kind and Event.Primitive: "semaphore", "rwmutex" (its kind prefix;
// Mode says read or write), "election" (it carries a value) or "lock".
func Primitive(t string) string {
	switch {
	case strings.HasPrefix(t, Read), strings.HasPrefix(t, Write):
		return "rwmutex"
	case strings.HasPrefix(t, "~s"):
		return "semaphore"
	}
	if _, ok := Value(t); ok {
		return "election"
	}
	return "lock"
}

// Mode says how a read-write lock's token holds it: "read" or "write";
// "" for any other token.
func Mode(t string) string {
	switch {
	case strings.HasPrefix(t, Read):
		return "read"
	case strings.HasPrefix(t, Write):
		return "write"
	}
	return ""
}

// IsDlock is the rule of dlock.Status.IsDlock, shared with the doctor
// (which cannot import dlock): a key held by a semaphore or a read-write
// lock (kind, as Primitive names it), or one beside which dlock keeps a
// fence counter (fence > 0) or a wait queue (waiters > 0), is dlock's.
func IsDlock(kind string, fence int64, waiters int) bool {
	switch kind {
	case "semaphore", "rwmutex":
		return true
	}
	return fence > 0 || waiters > 0
}
