package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
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

// userinfo finds the userinfo of u (the part before the host's "@"),
// whether or not u parses: u[start:end], ok false when there is none.
func userinfo(u string) (start, end int, ok bool) {
	if i := strings.Index(u, "://"); i >= 0 {
		start = i + 3
	}
	at := strings.LastIndex(u[start:], "@")
	return start, start + at, at >= 0
}

// masked returns u with whatever may be a password masked as "xxxxx",
// whether or not u parses (secrets says what): the user name stays.
func masked(u string) string {
	if start, end, ok := userinfo(u); ok {
		info := "xxxxx" // a bare "secret@host" is go-redis's password
		if user, _, ok := strings.Cut(u[start:end], ":"); ok {
			info = user + ":xxxxx"
		}
		u = u[:start] + info + u[end:]
	} else if i, j, ok := oddPort(u); ok {
		u = u[:i] + "xxxxx" + u[j:]
	}
	q := strings.IndexByte(u, '?')
	if q < 0 {
		return u
	}
	params := strings.Split(u[q+1:], "&")
	for n, p := range params {
		if name, _, ok := strings.Cut(p, "="); ok && secretName(name) {
			params[n] = name + "=xxxxx"
		}
	}
	return u[:q+1] + strings.Join(params, "&")
}

// secrets returns the parts of u that may be a password, whether or not u
// parses: the password of its userinfo (all of a bare "secret@"), or,
// without userinfo, a port that is not a number (the password of
// "redis://:secret" with its "@host" missing), and the values of query
// parameters named like a password.
func secrets(u string) []string {
	var out []string
	if start, end, ok := userinfo(u); ok {
		info := u[start:end]
		if _, pw, ok := strings.Cut(info, ":"); ok {
			info = pw
		}
		out = append(out, info)
	} else if i, j, ok := oddPort(u); ok {
		out = append(out, u[i:j])
	}
	if q := strings.IndexByte(u, '?'); q >= 0 {
		for _, p := range strings.Split(u[q+1:], "&") {
			if name, v, ok := strings.Cut(p, "="); ok && secretName(name) {
				out = append(out, v)
			}
		}
	}
	return out
}

// oddPort finds, in a u without userinfo, a port that is not a number:
// u[i:j], ok false when there is none.
func oddPort(u string) (i, j int, ok bool) {
	start := 0
	if k := strings.Index(u, "://"); k >= 0 {
		start = k + 3
	}
	end := len(u)
	if k := strings.IndexAny(u[start:], "/?#"); k >= 0 {
		end = start + k
	}
	c := strings.LastIndexByte(u[start:end], ':')
	if c < 0 {
		return 0, 0, false
	}
	i, j = start+c+1, end
	port := u[i:j]
	if port == "" || strings.Trim(port, "0123456789") == "" {
		return 0, 0, false
	}
	return i, j, true
}

// secretName reports whether a query parameter's name looks like one
// that holds a password or a token.
func secretName(name string) bool {
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
