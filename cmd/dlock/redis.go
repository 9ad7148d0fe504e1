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

// masked returns u with its userinfo (user:password@) masked, whether or
// not u parses: the password becomes "xxxxx", the user name stays.
func masked(u string) string {
	start, end, ok := userinfo(u)
	if !ok {
		return u
	}
	info := "xxxxx" // a bare "secret@host" is go-redis's password
	if user, _, ok := strings.Cut(u[start:end], ":"); ok {
		info = user + ":xxxxx"
	}
	return u[:start] + info + u[end:]
}

// secret returns the password part of u's userinfo ("" if none), whether
// or not u parses.
func secret(u string) string {
	start, end, ok := userinfo(u)
	if !ok {
		return ""
	}
	if _, pw, ok := strings.Cut(u[start:end], ":"); ok {
		return pw
	}
	return u[start:end]
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
	for _, pw := range []string{secret(u), unescaped(secret(u))} {
		if len(pw) >= 1 {
			text = strings.ReplaceAll(text, pw, "xxxxx")
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
