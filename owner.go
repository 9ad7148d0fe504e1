package dlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// Owner says who holds a lock, for the people who operate it: Inspect
// (Status.Owners), `dlock status` and `dlock ls` show it. It never holds
// the token.
type Owner struct {
	Host    string // the holder's host name; WithOwner's default: os.Hostname
	PID     int    // its process id; default: os.Getpid
	Program string // its program; default: the executable's base name
	Label   string // free form: a job's name, a request id

	// Since is when the hold began (its acquire was sent, on the holder's
	// clock), and Holder the start of its token (as Status.Holder): both
	// set by dlock, and ignored by WithOwner.
	Since  time.Time
	Holder string
}

// maxOwnerRecord is the most bytes an owner record may take.
const maxOwnerRecord = 1024

// WithOwner records o beside each hold it is given to (empty Host, PID and
// Program filled in from this process), in the lock key's hash slot, until
// the hold is released or its lease ends: Inspect and the command show who
// holds a lock, and since when. It costs the acquisition one more round
// trip to each node, and each renewal and Unlock one more script
// (BENCHMARKS.md); without it, nothing. An owner whose fields take more
// than 1 KiB is ErrInvalidArgument.
func WithOwner(o Owner) Option {
	o.Since, o.Holder = time.Time{}, ""
	return func(opts *options) { opts.owner = &o }
}

// this is the process's own Owner fields, read once.
var this = sync.OnceValue(func() Owner {
	host, _ := os.Hostname()
	return Owner{Host: host, PID: os.Getpid(), Program: filepath.Base(os.Args[0])}
})

// ownerWire is an owner record as stored: JSON, short names.
type ownerWire struct {
	Host    string `json:"h,omitempty"`
	PID     int    `json:"p,omitempty"`
	Program string `json:"g,omitempty"`
	Label   string `json:"l,omitempty"`
	Since   int64  `json:"s"` // unix ms
	Holder  string `json:"t"` // redacted
}

// ownerRecord returns o's record for the hold of token that began at
// since, with o's empty fields from this process.
func ownerRecord(o Owner, token string, since time.Time) (string, error) {
	p := this()
	w := ownerWire{Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label, Since: since.UnixMilli(), Holder: redact(token)}
	if w.Host == "" {
		w.Host = p.Host
	}
	if w.PID == 0 {
		w.PID = p.PID
	}
	if w.Program == "" {
		w.Program = p.Program
	}
	b, err := json.Marshal(w)
	if err != nil || len(b) > maxOwnerRecord {
		return "", invalid("owner record of %d bytes: at most %d", len(b), maxOwnerRecord)
	}
	return string(b), nil
}

// holderID names a hold in its key's owner records: a digest of the token,
// from which the token cannot be had.
func holderID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// ownerKey is the name of key's owner records.
func ownerKey(key string) string { return keyspace.Derive(ownerPrefix, key) }

// keepOwner writes (record non-empty) or drops l's owner record on every
// node, for ttl from now. A node that fails keeps the record it had until
// it expires: the record is for people, and the lock does not depend on it.
func (l *Lock) keepOwner(ctx context.Context, record string, ttl time.Duration) {
	keys := []string{ownerKey(l.Key())}
	id := holderID(l.token)
	for _, n := range l.c.nodes {
		if err := n.Run(ctx, ownerScript, keys, id, record, ttl.Milliseconds()).Err(); err != nil {
			l.c.warn("dlock: could not keep an owner record", slog.String("key", l.Key()), slog.String("node", n.Name), slog.Any("err", err))
		}
	}
}

// recordOwner writes l's owner record, when o asks for one (WithOwner),
// before the acquisition returns l: bounded, and written even if ctx has
// just ended, as the hold it describes has begun.
func (c *Client) recordOwner(ctx context.Context, l *Lock, o options) {
	if l == nil || o.owner == nil {
		return
	}
	record, err := ownerRecord(*o.owner, l.token, l.acquired)
	if err != nil {
		return // checked with the options
	}
	l.owner = record
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	l.keepOwner(ctx, record, l.ttl)
}

// ownersOf merges the nodes' owner records, one per hold.
func ownersOf(answers []answer[keyState]) []Owner {
	var out []Owner
	seen := map[Owner]bool{}
	for _, a := range answers {
		for _, o := range a.V.owners {
			if a.Err == nil && !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

// liveOwners reads the owner records in reply (inspect.lua's: "until_ms
// JSON" each) that are still live at now_ms, oldest hold first.
func liveOwners(reply []any, nowMS int64) []Owner {
	var out []Owner
	for _, r := range reply {
		s, _ := r.(string)
		until, js, ok := strings.Cut(s, " ")
		if u, err := strconv.ParseInt(until, 10, 64); !ok || err != nil || u <= nowMS {
			continue
		}
		var w ownerWire
		if json.Unmarshal([]byte(js), &w) != nil {
			continue
		}
		out = append(out, Owner{Host: w.Host, PID: w.PID, Program: w.Program, Label: w.Label,
			Since: time.UnixMilli(w.Since), Holder: w.Holder})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}
