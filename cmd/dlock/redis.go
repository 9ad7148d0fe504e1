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
// to stderr. close closes all of it. Errors never show a URL's password.
func (r *redisFlags) connect(stderr io.Writer) (c *dlock.Client, rdbs []*redis.Client, close func(), err error) {
	var ucs []redis.UniversalClient
	for _, u := range r.list() {
		opts, err := redis.ParseURL(u)
		if err != nil {
			for _, rdb := range rdbs {
				rdb.Close()
			}
			return nil, nil, nil, fmt.Errorf("bad Redis URL %s: %v", redact(u), scrub(err, u))
		}
		opts.DialTimeout = 5 * time.Second
		rdb := redis.NewClient(opts)
		rdbs = append(rdbs, rdb)
		ucs = append(ucs, rdb)
	}
	c = dlock.New(ucs...)
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

// redact returns u with any password replaced by "xxxxx".
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redact(u)
	}
	return out
}

// scrub removes u's password from err's text, in case a parser quoted it.
func scrub(err error, u string) error {
	p, perr := url.Parse(u)
	if perr != nil || p.User == nil {
		return err
	}
	if pw, ok := p.User.Password(); ok && pw != "" {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}
