package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// defaultRedis is used when neither --redis nor $DLOCK_REDIS is given.
const defaultRedis = "redis://127.0.0.1:6379"

// redisFlags holds the flags every subcommand that talks to Redis shares.
type redisFlags struct {
	urls []string
}

func (r *redisFlags) String() string { return strings.Join(redactAll(r.urls), ",") }

func (r *redisFlags) Set(v string) error {
	r.urls = append(r.urls, v)
	return nil
}

func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.Var(r, "redis", "Redis `URL`; repeat for Redlock over several independent masters (default $DLOCK_REDIS, then "+defaultRedis+")")
}

// list returns the URLs to use: the flags, else $DLOCK_REDIS, else the
// default.
func (r *redisFlags) list() []string {
	if len(r.urls) > 0 {
		return r.urls
	}
	if env := os.Getenv("DLOCK_REDIS"); env != "" {
		var urls []string
		for _, u := range strings.Split(env, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		return urls
	}
	return []string{defaultRedis}
}

// connect builds go-redis clients for the URLs and a dlock Client over them,
// which logs its warnings (a failed renewal, a Redlock wait for slow nodes)
// to stderr. close closes all of it. A URL that does not parse is an error
// (the callers' usage error) that says what is wrong and shows the URL with
// its userinfo masked; no error ever shows a password.
func (r *redisFlags) connect(stderr io.Writer) (c *dlock.Client, rdbs []*redis.Client, close func(), err error) {
	var opts []*redis.Options
	urls := r.list()
	for _, u := range urls {
		o, err := parseRedisURL(u)
		if err != nil {
			return nil, nil, nil, err
		}
		for j, earlier := range opts {
			if earlier.Addr == o.Addr { // dlock.New would panic
				return nil, nil, nil, fmt.Errorf("Redis URLs %q and %q are the same server (%s): Redlock needs independent masters", masked(urls[j]), masked(u), o.Addr)
			}
		}
		o.DialTimeout = 5 * time.Second
		opts = append(opts, o)
	}
	for _, o := range opts {
		rdbs = append(rdbs, redis.NewClient(o))
	}
	c = dlock.New(rdbs...)
	c.SetLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
				return slog.Attr{} // a command's stderr, not a log file
			}
			return a
		},
	})))
	return c, rdbs, func() {
		c.Close()
		for _, rdb := range rdbs {
			rdb.Close()
		}
	}, nil
}

// parseRedisURL parses a Redis URL as go-redis does, with errors that say
// what is wrong, show the URL masked, and suggest the scheme when it is
// missing.
func parseRedisURL(u string) (*redis.Options, error) {
	opts, err := redis.ParseURL(u)
	if _, _, odd := secretSpans(u); err == nil && odd {
		// go-redis would dial a host named after the password.
		return nil, fmt.Errorf("bad Redis URL %q: a port that is not a number (is the '@' after a password missing?)", masked(u))
	}
	if err == nil {
		return opts, nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the url package quotes the whole URL; say only what is wrong
	}
	msg := scrub(err, u).Error()
	if !strings.Contains(u, "://") {
		msg += fmt.Sprintf(" (a Redis URL starts with redis:// or rediss://: did you mean %q?)", "redis://"+masked(u))
	}
	return nil, fmt.Errorf("bad Redis URL %q: %s", masked(u), msg)
}

// masked returns u with whatever may be a password masked as "xxxxx",
// whether or not u parses (secretSpans says what): the user name, host and
// port stay.
func masked(u string) string {
	spans, _, _ := secretSpans(u)
	for i := len(spans) - 1; i >= 0; i-- {
		u = u[:spans[i][0]] + "xxxxx" + u[spans[i][1]:]
	}
	return u
}

// secrets returns the parts of u that may be a password, or a piece of
// one that an error may quote (see secretSpans).
func secrets(u string) []string {
	spans, quoted, _ := secretSpans(u)
	var out []string
	for _, sp := range append(spans, quoted...) {
		out = append(out, u[sp[0]:sp[1]])
	}
	return out
}

// secretSpans returns where u may hold a password, in order: u[sp[0]:sp[1]]
// for each span. They are the password of its userinfo (all of a bare
// "secret@host", go-redis's password); without userinfo, every field after
// the host's first ':' that is not a port number (as in "redis://:secret"
// or "redis://:secret:6379", whose '@host' is missing: odd reports those);
// the values of query parameters named like a password or a token; and a
// fragment. A URL that does not parse is read a part at a time between
// commas (a list given as one URL), and its userinfo may run past a '/',
// '?' or '#' to the last '@'; quoted are then the pieces of that userinfo
// which a parser reads as a port, and may quote in its error
// ("redis://:pa/ss@host" reads as host "" and port "pa").
func secretSpans(u string) (spans, quoted [][2]int, odd bool) {
	ok := parses(u)
	parts := []string{u}
	if !ok {
		parts = strings.Split(u, ",")
	}
	offset := 0
	for _, part := range parts {
		sp, q, o := partSpans(part, offset, ok)
		spans, quoted, odd = append(spans, sp...), append(quoted, q...), odd || o
		offset += len(part) + 1
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	return spans, quoted, odd
}

// parses reports whether go-redis takes u as a Redis URL.
func parses(u string) bool {
	_, err := redis.ParseURL(u)
	return err == nil
}

// authority returns where u's authority is, as url.Parse reads it: after
// the scheme's "://", up to the first '/', '?' or '#' (the query and
// fragment are cut off first, then the path; the userinfo ends at the
// authority's last '@').
func authority(u string) (start, end int) {
	if i := strings.Index(u, "://"); i >= 0 {
		start = i + 3
	}
	end = len(u)
	if i := strings.IndexAny(u[start:], "/?#"); i >= 0 {
		end = start + i
	}
	return start, end
}

// partSpans is secretSpans for one URL u, found at offset of what the
// spans index; ok tells that u parses.
func partSpans(u string, offset int, ok bool) (spans, quoted [][2]int, odd bool) {
	shift := func(fields [][2]int) [][2]int {
		for i := range fields {
			fields[i][0], fields[i][1] = fields[i][0]+offset, fields[i][1]+offset
		}
		return fields
	}
	add := func(i, j int) { spans = append(spans, [2]int{offset + i, offset + j}) }
	start, end := authority(u)
	at := strings.LastIndex(u[start:end], "@")
	if at < 0 && !ok {
		if at = strings.LastIndex(u[start:], "@"); at >= 0 {
			quoted = shift(oddFields(u, start, end))
		}
	}
	host := start
	if at >= 0 {
		info := u[start : start+at]
		if c := strings.IndexByte(info, ':'); c >= 0 {
			add(start+c+1, start+at)
		} else {
			add(start, start+at)
		}
		host = start + at + 1
	} else if fields := oddFields(u, start, end); len(fields) > 0 {
		spans, odd = append(spans, shift(fields)...), true
	}
	rest := u[host:]
	if f := strings.IndexByte(rest, '#'); f >= 0 {
		add(host+f+1, len(u))
		rest = rest[:f]
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		i := host + q + 1
		for _, p := range strings.Split(rest[q+1:], "&") {
			if name, v, found := strings.Cut(p, "="); found && secretName(name) {
				add(i+len(name)+1, i+len(name)+1+len(v))
			}
			i += len(p) + 1
		}
	}
	return spans, quoted, odd
}

// oddFields returns the fields of the authority u[start:end] (no userinfo)
// after its host that are not port numbers: [i, j) pairs.
func oddFields(u string, start, end int) (fields [][2]int) {
	a := u[start:end]
	i := 0
	if strings.HasPrefix(a, "[") { // an IPv6 address: its colons are not ports'
		j := strings.IndexByte(a, ']')
		if j < 0 {
			return nil
		}
		i = j + 1
	} else if c := strings.IndexByte(a, ':'); c >= 0 {
		i = c
	} else {
		return nil
	}
	for i < len(a) {
		if a[i] != ':' {
			return append(fields, [2]int{start + i, end}) // "[::1]x": not a port either
		}
		j := strings.IndexByte(a[i+1:], ':')
		if j < 0 {
			j = len(a)
		} else {
			j += i + 1
		}
		if f := a[i+1 : j]; f != "" && !isPort(f) {
			fields = append(fields, [2]int{start + i + 1, start + j})
		}
		i = j
	}
	return fields
}

// isPort reports whether f is a TCP port number.
func isPort(f string) bool {
	f = strings.TrimSpace(f) // "6379 ", pasted: the error should show it
	n, err := strconv.Atoi(f)
	return err == nil && n > 0 && n <= 65535 && strings.Trim(f, "0123456789") == ""
}

// secretName reports whether a query parameter's name (escaped or not)
// looks like one that holds a password or a token.
func secretName(name string) bool {
	if v, err := url.QueryUnescape(name); err == nil {
		name = v
	}
	name = strings.ToLower(name)
	for _, s := range []string{"pass", "pwd", "secret", "token", "auth"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// redact returns u with its password masked (for display).
func redact(u string) string { return masked(u) }

func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact(u)
	}
	return out
}

// scrub removes u's password from err's text, in case anything quoted it,
// the raw URL and its unescaped password alike.
func scrub(err error, u string) error {
	text := err.Error()
	for _, s := range secrets(u) {
		for _, pw := range []string{s, unescaped(s)} {
			if len(pw) >= 1 {
				text = strings.ReplaceAll(text, pw, "xxxxx")
			}
		}
	}
	if text == err.Error() {
		return err
	}
	return errors.New(text)
}

func unescaped(s string) string {
	if v, err := url.PathUnescape(s); err == nil {
		return v
	}
	return s
}
