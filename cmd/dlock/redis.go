package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	flag "github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
)

// defaultRedis is used when neither --redis nor $DLOCK_REDIS is given.
const defaultRedis = "redis://127.0.0.1:6379"

// Where the Redis URLs came from, for messages that name the address.
const (
	fromFlag    = "--redis"
	fromEnv     = "$DLOCK_REDIS"
	fromDefault = "the default"
)

// redisFlags holds the flags every subcommand that talks to Redis shares.
type redisFlags struct {
	urls []string
}

func (r *redisFlags) String() string { return strings.Join(redactAll(r.urls), ",") }

// Type names what --redis takes, in help (its usage names it too).
func (r *redisFlags) Type() string { return "URL" }

func (r *redisFlags) Set(v string) error {
	r.urls = append(r.urls, v)
	return nil
}

func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.Var(r, "redis", "Redis `URL`; repeat for Redlock over several independent masters (default $DLOCK_REDIS, then "+defaultRedis+")")
}

// list returns the URLs to use, and where they came from: the flags, else
// $DLOCK_REDIS, else the default.
func (r *redisFlags) list() (urls []string, source string) {
	if len(r.urls) > 0 {
		return r.urls, fromFlag
	}
	if env := os.Getenv("DLOCK_REDIS"); env != "" {
		return splitURLs(env), fromEnv
	}
	return []string{defaultRedis}, fromDefault
}

// splitURLs splits a comma-separated list of URLs, as $DLOCK_REDIS holds
// them: at the commas followed by a Redis URL's scheme (hasScheme), so
// that a comma in a password does not cut the URL in two (each half of
// which would be shown as a URL of its own in an error).
func splitURLs(list string) (urls []string) {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if i > 0 && len(urls) > 0 && !hasScheme(strings.TrimSpace(p)) {
			urls[len(urls)-1] += "," + p // a comma of the URL before
			continue
		}
		urls = append(urls, p)
	}
	out := urls[:0]
	for _, u := range urls {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// hasScheme reports whether u starts with a scheme go-redis takes and
// "://".
func hasScheme(u string) bool {
	scheme, _, ok := strings.Cut(u, "://")
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		return ok
	}
	return false
}

// connect builds go-redis clients for the URLs and a dlock Client over them,
// which logs its warnings (a failed renewal, a Redlock wait for slow nodes)
// to stderr. close closes all of it. A URL that does not parse is an error
// (the callers' usage error) that says what is wrong and shows the URL with
// its userinfo masked; no error ever shows a password (parseRedisURL).
func (r *redisFlags) connect(stderr io.Writer) (c *dlock.Client, rdbs []*redis.Client, close func(), err error) {
	var opts []*redis.Options
	urls, source := r.list()
	for _, u := range urls {
		o, err := parseRedisURL(u, source)
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

// firstContact dials the nodes once before a command waits for a lock: an
// address where nothing listens when the command starts is a wrong
// address more often than an outage, so the command fails at once (69)
// rather than wait through it. A server that is only slow to answer is
// waited for, and once the command has started, its wait rides out
// outages (the library's Lock does). It returns the first refusal when a
// majority of the nodes refused.
func firstContact(rdbs []*redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errs := make([]error, len(rdbs))
	var wg sync.WaitGroup
	for i, rdb := range rdbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ue *unreachableError
			if err := rdb.Ping(ctx).Err(); errors.As(err, &ue) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	var first error
	refused := 0
	for _, err := range errs {
		if err != nil {
			refused++
			first = cmp.Or(first, err)
		}
	}
	if refused > len(rdbs)-(len(rdbs)/2+1) {
		return first
	}
	return nil
}

// parseRedisURL parses a Redis URL from source (fromFlag, fromEnv or
// fromDefault) as go-redis does, and prepares its connections (connected).
// Its errors show the URL masked and say what is wrong without quoting the
// parser on u itself, whose messages quote the URL's pieces, the password's
// among them: what is wrong is found by parsing the masked URL, which holds
// no secret left to quote, or, when that parses, is in the masked part.
func parseRedisURL(u, source string) (*redis.Options, error) {
	opts, err := redis.ParseURL(u)
	m := masked(u)
	_, odd := secretSpans(u)
	_, _, suspect := userinfo(u)
	switch {
	case err == nil && odd:
		// go-redis would dial a host named after the password.
		return nil, fmt.Errorf("invalid Redis URL %q (from %s): a port that is not a number (is the '@' after a password missing?)", m, source)
	case err == nil && suspect:
		// It would dial a host made of what comes before the '#', '/'
		// or '?'; in an error, that would show part of the password.
		return nil, fmt.Errorf("invalid Redis URL %q (from %s): an '@' after the host; percent-encode a password that holds @ : / # ? or %% (as %%40 %%3A %%2F %%23 %%3F %%25)", m, source)
	case err == nil:
		return connected(opts, source), nil
	}
	why := "its user name or password does not parse"
	if _, merr := redis.ParseURL(m); merr != nil {
		var ue *url.Error
		if errors.As(merr, &ue) {
			merr = ue.Err // the url package quotes the whole URL: say only what is wrong
		}
		why = merr.Error()
	}
	if start, at, _ := userinfo(u); at > start && strings.ContainsAny(u[start:at], "@/#?%") {
		why += "; percent-encode a password that holds @ : / # ? or % (as %40 %3A %2F %23 %3F %25)"
	}
	if !strings.Contains(u, "://") {
		why += fmt.Sprintf(" (a Redis URL starts with redis:// or rediss://: did you mean %q?)", "redis://"+m)
	}
	return nil, fmt.Errorf("invalid Redis URL %q (from %s): %s", m, source, why)
}

// connected prepares opts' connections: a failed dial says which address
// could not be reached and where it came from (unreachableError), and a
// new connection is checked with a PING, so that a server that wants a
// password the URL does not give refuses at once with NOAUTH (a command
// sent on the connection never ran) instead of running it unauthenticated
// into a protocol error ("unauthenticated multibulk length", for dlock's
// longer scripts) that leaves the library unsure whether it ran.
func connected(opts *redis.Options, source string) *redis.Options {
	dial := redis.NewDialer(opts)
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, &unreachableError{addr: addr, source: source, err: err}
		}
		return cn, nil
	}
	opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.Ping(ctx).Err() }
	return opts
}

// unreachableError is a dial that failed: it names the address and where
// the address came from, so that a forgotten $DLOCK_REDIS shows as such.
type unreachableError struct {
	addr, source string
	err          error
}

func (e *unreachableError) Error() string {
	from := "from " + e.source
	if e.source == fromDefault {
		from = "the default; set --redis or $DLOCK_REDIS"
	}
	cause := e.err
	var oe *net.OpError
	if errors.As(cause, &oe) && oe.Err != nil {
		cause = oe.Err // "connect: connection refused", without the address again
	}
	return fmt.Sprintf("cannot reach Redis at %s (%s): %v", e.addr, from, cause)
}

func (e *unreachableError) Unwrap() error { return e.err }

// masked returns u with whatever may be a secret masked as "xxxxx" (see
// secretSpans), by position, whether or not u parses: the scheme, host,
// port and database stay, and the user name of a URL that parses.
func masked(u string) string {
	spans, _ := secretSpans(u)
	for i := len(spans) - 1; i >= 0; i-- {
		u = u[:spans[i][0]] + "xxxxx" + u[spans[i][1]:]
	}
	return u
}

// secretSpans returns where u may hold a secret, in order: u[sp[0]:sp[1]]
// for each span. For a URL that parses, that is the password of its
// userinfo (all of a bare "secret@host", which go-redis takes as the
// password), the values of query parameters named like a password or a
// token, and a fragment. A URL that does not parse, or has an '@' after
// its host outside the query (suspect, from userinfo), may have a password
// that holds '@', '/', '#' or '?', so its userinfo is taken to run from
// the "//" to the last '@' of the whole URL, and is masked whole, user
// name included. Without userinfo, a field after the host's first ':'
// that is not a port number may be a password whose "@host" is missing
// ("redis://:secret"): odd reports it, and the rest of the URL from it is
// masked.
func secretSpans(u string) (spans [][2]int, odd bool) {
	start, at, suspect := userinfo(u)
	if at < 0 {
		end := authority(u, start)
		if fields := oddFields(u, start, end); len(fields) > 0 {
			return [][2]int{{fields[0][0], len(u)}}, true
		}
		return secrets(u, start, nil), false
	}
	if !suspect {
		if c := strings.IndexByte(u[start:at], ':'); c >= 0 {
			start += c + 1 // the user name stays
		}
	}
	return secrets(u, at+1, [][2]int{{start, at}}), false
}

// userinfo returns where u's userinfo may be, u[start:at]: from after the
// scheme's "//" to the last '@' of the URL; at is -1 when there is none.
// For a URL that parses, that is its userinfo as url.Parse reads it, up to
// the authority's last '@' (at is -1 when the authority has none), if the
// URL's other '@'s are in its query ("redis://h:6379/0?client_name=me@box").
// Otherwise suspect is true: the URL does not parse, or has an '@' in its
// path or fragment, a sign of a password that holds '/', '?' or '#' and
// was cut there ("redis://u:pw#x@host" parses, as host "pw").
func userinfo(u string) (start, at int, suspect bool) {
	if i := strings.Index(u, "://"); i >= 0 {
		start = i + 3
	}
	last := strings.LastIndexByte(u[start:], '@')
	if last < 0 {
		return start, -1, false
	}
	last += start
	if !parses(u) {
		return start, last, true
	}
	end := authority(u, start)
	if last < end {
		return start, last, false
	}
	// go-redis refuses a query option it does not know, but drops a
	// malformed pair unread: a query that parses whole, with no '@' in the
	// path or fragment, has its '@'s in known options' values.
	if pu, err := url.Parse(u); err == nil && !strings.Contains(pu.EscapedPath()+pu.EscapedFragment(), "@") {
		if _, err := url.ParseQuery(pu.RawQuery); err == nil {
			return start, strings.LastIndexByte(u[:end], '@'), false
		}
	}
	return start, last, true
}

// secrets adds to spans the values of u's query parameters named like a
// password or a token, and its fragment, looked for from host on.
func secrets(u string, host int, spans [][2]int) [][2]int {
	add := func(i, j int) { spans = append(spans, [2]int{i, j}) }
	rest, fragment := u[host:], -1
	if f := strings.IndexByte(rest, '#'); f >= 0 {
		rest, fragment = rest[:f], host+f+1
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
	if fragment >= 0 {
		add(fragment, len(u)) // last: the spans are in order
	}
	return spans
}

// parses reports whether go-redis takes u as a Redis URL.
func parses(u string) bool {
	_, err := redis.ParseURL(u)
	return err == nil
}

// authority returns where the authority of u, which starts at start,
// ends, as url.Parse reads it: at the first '/', '?' or '#'.
func authority(u string, start int) (end int) {
	if i := strings.IndexAny(u[start:], "/?#"); i >= 0 {
		return start + i
	}
	return len(u)
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
