package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/console"
	"github.com/redis/go-redis/v9"
)

const uiHelp = `
Serve the lock console: a page that shows, live, every lock, semaphore,
read-write lock and election whose key matches PATTERN (default *), with
its holders and their owner records, the TTL counting down, the fence, the
waiters in order, a timeline of recent grants, hand-offs, releases,
expiries and revocations, doctor's findings and the audit stream.

It listens on loopback unless told otherwise, and is read-only unless
--allow-revoke is given with a way to authenticate: --user (HTTP basic
auth on every page, the password from $DLOCK_UI_PASSWORD) or
$DLOCK_UI_TOKEN (a bearer token the page asks for to revoke). No token
or password ever reaches the page. It stops on SIGINT or SIGTERM.

Exit codes: 0 stopped by a signal; 64 usage; 69 Redis unreachable or
refusing the reads the console needs (SCAN among them), or the address
cannot be listened on.

Examples:
  dlock ui
  dlock ui --listen 127.0.0.1:8080 'order:*'
  DLOCK_UI_PASSWORD=... dlock ui --allow-revoke --user ops
`

func uiMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ui", "[flags] [PATTERN]", uiHelp, stderr)
	var rf redisFlags
	rf.register(fs)
	listen := fs.String("listen", "127.0.0.1:7070", "address to serve the console on")
	allow := fs.Bool("allow-revoke", false, "allow revoking holds from the page (needs --user or $DLOCK_UI_TOKEN)")
	user := fs.String("user", "", "require HTTP basic auth as this user on every page, the password from $DLOCK_UI_PASSWORD")
	limit := fs.Int("limit", 1000, "show at most this many keys per node")
	interval := durationFlag(fs, "interval", time.Second, "how often to scan for keys taken or let go without a notification")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 1 {
		return usageError(stderr, "ui: give at most one PATTERN")
	}
	if *limit <= 0 || *interval <= 0 {
		return usageError(stderr, "ui: --limit and --interval must be positive")
	}
	auth, err := uiAuth(*user, os.Getenv("DLOCK_UI_PASSWORD"), os.Getenv("DLOCK_UI_TOKEN"))
	if err != nil {
		return usageError(stderr, "ui: %v", err)
	}
	if *allow && auth == nil {
		return usageError(stderr, "ui: --allow-revoke needs --user (with $DLOCK_UI_PASSWORD) or $DLOCK_UI_TOKEN")
	}
	c, rdbs, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	if err := readable(rdbs, fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "dlock: ui: %v\n", err)
		return exitRedis
	}
	cfg := console.Config{Locks: c, Pattern: fs.Arg(0), Limit: *limit, Interval: *interval, Revoke: *allow}
	for _, rdb := range rdbs {
		cfg.Nodes = append(cfg.Nodes, redis.UniversalClient(rdb))
	}
	if auth != nil {
		cfg.Authorize, cfg.Auth = auth.authorize, auth.kind
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "dlock: ui: %v\n", err)
		return exitRedis
	}
	defer ln.Close()
	cfg.Hosts = loopbackHosts(ln.Addr().String())
	con, err := console.New(cfg)
	if err != nil {
		return usageError(stderr, "ui: %v", err)
	}
	defer con.Close()
	var h http.Handler = con
	if auth != nil && auth.kind == "basic" {
		h = auth.wall(con)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() && auth == nil {
		fmt.Fprintf(stderr, "dlock: ui: serving on %s without authentication: anyone who reaches it sees every lock\n", ln.Addr())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	fmt.Fprintf(stdout, "dlock ui: serving http://%s/ (read-only: %v)\n", ln.Addr(), !*allow)
	return serveUntilSignal(ln, h, con, sig)
}

// readable reports, before a page could say "no locks", a node that cannot
// be reached (firstContact) or that refuses this user: a wrong password, a
// missing permission (console.Check: SCAN, the reads of a row, the audit
// stream).
func readable(rdbs []*redis.Client, pattern string) error {
	if err := firstContact(rdbs); err != nil {
		return err
	}
	var reply redis.Error
	for _, rdb := range rdbs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if errors.As(err, &reply) {
			return fmt.Errorf("%s: %w", rdb.Options().Addr, err)
		}
	}
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, rdb := range rdbs {
		nodes[i] = rdb
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := console.Check(ctx, nodes, pattern); errors.As(err, &reply) {
		return fmt.Errorf("%w: this Redis user may not read what the console shows (docs/console.md gives a read-only ACL)", err)
	}
	return nil
}

// serveUntilSignal serves h on ln until a signal arrives on sig; the
// console's streams end first, so that the server can shut down.
func serveUntilSignal(ln net.Listener, h http.Handler, con *console.Console, sig <-chan os.Signal) int {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-sig:
	case <-done:
	}
	_ = con.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return exitOK
}

// loopbackHosts are the Host headers a console listening on the loopback
// address addr answers: the usual loopback names and addr's own (a page of
// another site that points its own name there is refused: DNS rebinding);
// nil, any, for other addresses.
func loopbackHosts(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return nil
	}
	return []string{"127.0.0.1", "localhost", "::1", "[::1]", host, "[" + host + "]"}
}

// uiAuthn is how `dlock ui` authenticates: basic auth as one user, or a
// bearer token for revocations. Secrets are kept as digests, compared in
// constant time.
type uiAuthn struct {
	kind   string // "basic" or "token"
	user   string
	secret [32]byte
}

// uiAuth returns the authentication the flags and environment ask for
// (nil: none).
func uiAuth(user, password, token string) (*uiAuthn, error) {
	switch {
	case user != "" && password == "":
		return nil, errors.New("--user needs the password in $DLOCK_UI_PASSWORD")
	case user != "" && strings.Contains(user, ":"):
		return nil, errors.New("--user may not contain ':'")
	case user != "":
		return &uiAuthn{kind: "basic", user: user, secret: sha256.Sum256([]byte(password))}, nil
	case token != "":
		return &uiAuthn{kind: "token", user: "token", secret: sha256.Sum256([]byte(token))}, nil
	}
	return nil, nil
}

// authorize reports who asks, and whether they proved it.
func (a *uiAuthn) authorize(r *http.Request) (string, bool) {
	var given string
	if a.kind == "basic" {
		u, p, ok := r.BasicAuth()
		if !ok || u != a.user {
			return "", false
		}
		given = p
	} else {
		t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return "", false
		}
		given = t
	}
	sum := sha256.Sum256([]byte(given))
	if subtle.ConstantTimeCompare(sum[:], a.secret[:]) != 1 {
		return "", false
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return a.user + "@" + host + " (dlock ui)", true
}

// wall asks for basic auth on every request.
func (a *uiAuthn) wall(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := a.authorize(r); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="dlock console", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
