package dlock

import (
	"context"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/owner"
	"github.com/dlock-go/dlock/internal/tokens"
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

// WithOwner records o beside each hold it is given to (empty Host, PID and
// Program filled in from this process), in the lock key's hash slot, until
// the hold is released or its lease ends: Inspect and the command show who
// holds a lock, and since when. It costs the acquisition one more round
// trip to each node, and each renewal and Unlock one more script
// (BENCHMARKS.md); without it, nothing. An owner whose fields take more
// than 1 KiB is ErrInvalidArgument. Program and Label are stored with the
// password of user:password@ (a URL's or not) masked as user:xxxxx@, and
// the value given to a name that says secret (PGPASSWORD=, --api-key=,
// JSON's "token":): anyone who may read the lock may read them. A secret
// given as an argument of its own (--password hunter2) cannot be told
// from any other argument; docs/command.md lists what is masked.
func WithOwner(o Owner) Option {
	o.Since, o.Holder = time.Time{}, ""
	return func(opts *options) { opts.owner = &o }
}

// ownerRecord returns o's record for the hold of token that began at since.
func ownerRecord(o Owner, token string, since time.Time) (string, error) {
	r, err := owner.Encode(owner.Record{Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label,
		Since: since.UnixMilli(), Holder: tokens.Redact(token)})
	if err != nil {
		return "", invalid("%v", err)
	}
	return r, nil
}

// ownerOf returns a stored record as an Owner.
func ownerOf(r owner.Record) Owner {
	return Owner{Host: r.Host, PID: r.PID, Program: r.Program, Label: r.Label, Since: r.Time(), Holder: r.Holder}
}

// keepOwner writes (record non-empty) or drops l's owner record on every
// node, for ttl from now. A node that fails keeps the record it had until
// it expires: the record is for people, and the lock does not depend on it.
func (l *Lock) keepOwner(ctx context.Context, record string, ttl time.Duration) {
	keys := []string{keyspace.Owner(l.Key())}
	id := owner.ID(l.token)
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

// ownersOf merges the nodes' owner records, one per hold, oldest first.
func ownersOf(answers []answer[keyState]) []Owner {
	var merged []owner.Record
	seen := map[owner.Record]bool{}
	for _, a := range answers {
		for _, r := range a.V.owners {
			if a.Err == nil && !seen[r] {
				seen[r] = true
				merged = append(merged, r)
			}
		}
	}
	owner.Sort(merged)
	out := make([]Owner, 0, len(merged))
	for _, r := range merged {
		out = append(out, ownerOf(r))
	}
	return out
}
