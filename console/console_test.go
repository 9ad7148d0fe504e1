package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/console"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

var server *redistest.Server

func TestMain(m *testing.M) {
	s, err := redistest.Spawn()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	s.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// state is the part of api/state the tests read.
type state struct {
	Rows     []console.Row   `json:"rows"`
	Audit    []console.Audit `json:"audit"`
	Problems []string        `json:"problems"`
	Cut      *console.Cut    `json:"cut"`
}

// setup returns a Client, its go-redis client, a console over them with
// cfg, and an HTTP server for it; all closed with the test.
func setup(t *testing.T, cfg console.Config) (*dlock.Client, *redis.Client, *httptest.Server) {
	t.Helper()
	rdb := server.Client(t)
	c := dlock.New(rdb)
	cfg.Locks, cfg.Nodes, cfg.Interval = c, []redis.UniversalClient{rdb}, 100*time.Millisecond
	if cfg.Pattern == "" {
		cfg.Pattern = "t:" + strings.ReplaceAll(t.Name(), "/", ":") + ":*"
	}
	con, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	t.Cleanup(func() { srv.Close(); con.Close(); c.Close() })
	return c, rdb, srv
}

// serve starts a console for cfg (its Interval 100 ms) and an HTTP server
// for it, both closed with the test.
func serve(t *testing.T, cfg console.Config) *httptest.Server {
	t.Helper()
	cfg.Interval = 100 * time.Millisecond
	con, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	t.Cleanup(func() { srv.Close(); con.Close() })
	return srv
}

func key(t *testing.T, name string) string {
	return "t:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + name
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// get reads api/state (and its raw body).
func get(t *testing.T, srv *httptest.Server) (state, string) {
	t.Helper()
	res, err := http.Get(srv.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var st state
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return st, string(body)
}

// until polls api/state until cond holds for it, for up to 20 s.
func until(t *testing.T, srv *httptest.Server, what string, cond func(state) bool) state {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, body := get(t, srv)
		if cond(st) {
			return st
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within 20 s; the state:\n%s", what, body)
		}
	}
}

func row(st state, key string) *console.Row {
	for i := range st.Rows {
		if st.Rows[i].Key == key {
			return &st.Rows[i]
		}
	}
	return nil
}

func TestTheStateShowsEveryKindWithItsHoldersOwnersAndWaiters(t *testing.T) {
	c, _, srv := setup(t, console.Config{})
	ctx := ctxT(t)
	lk, sk, ek, rk := key(t, "lock"), key(t, "sem"), key(t, "elect"), key(t, "rw")
	l, err := c.TryLock(ctx, lk, dlock.WithTTL(30*time.Second), dlock.WithOwner(dlock.Owner{Label: "nightly report"}))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctx, lk)
		if err == nil {
			err = w.Unlock(ctx)
		}
		waited <- err
	}()
	sem := c.Semaphore(sk, 3)
	p1, _ := sem.TryAcquire(ctx, dlock.WithOwner(dlock.Owner{Label: "worker 1"}))
	p2, _ := sem.TryAcquire(ctx)
	e := c.Election(ek)
	term, err := e.Campaign(ctx, "node-a")
	if err != nil || p1 == nil || p2 == nil {
		t.Fatal(err)
	}
	reader, err := c.RWMutex(rk).TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Unlock(ctx)
	st := until(t, srv, "the lock with its waiter, the semaphore, the election and the read-write lock", func(st state) bool {
		r := row(st, lk)
		// Each row is read on its own: the semaphore's may come from a read
		// between its two acquires, and is read again.
		s := row(st, sk)
		return r != nil && len(r.Waiters) == 1 && s != nil && len(s.Holds) == 2 && row(st, ek) != nil && row(st, rk) != nil
	})
	r := row(st, lk)
	if r.Kind != "lock" || !r.Held || len(r.Holds) != 1 || r.Holds[0].Owner == nil || r.Holds[0].Owner.Label != "nightly report" ||
		r.Holds[0].Owner.PID != os.Getpid() || r.Fence != l.Fence() || r.TTL <= 0 || r.TTL > 30000 {
		t.Fatalf("the lock's row: %+v", r)
	}
	if s := row(st, sk); s.Kind != "semaphore" || s.Permits != 3 || len(s.Holds) != 2 {
		t.Fatalf("the semaphore's row: %+v", s)
	}
	if el := row(st, ek); el.Kind != "election" || el.Leader != "node-a" {
		t.Fatalf("the election's row: %+v", el)
	}
	if rw := row(st, rk); rw.Kind != "rwmutex" || rw.Mode != "read" || len(rw.Holds) != 1 {
		t.Fatalf("the read-write lock's row: %+v", rw)
	}
	_, body := get(t, srv)
	for _, tok := range []string{l.Token(), p1.Token(), p2.Token()} {
		if strings.Contains(body, tok[len(tok)-12:]) {
			t.Fatalf("the state holds a token's secret part:\n%s", body)
		}
	}
	// The waiter is served when the holder lets go, and the history says so.
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	until(t, srv, "the lock's release in its history", func(st state) bool {
		r := row(st, lk)
		return r != nil && !r.Held && len(r.History) >= 2 && r.History[len(r.History)-1].Kind == "release"
	})
	_ = term.Unlock(ctx)
	_ = p1.Unlock(ctx)
	_ = p2.Unlock(ctx)
}

// events reads a console's event stream, sending each event's name.
func events(t *testing.T, srv *httptest.Server) <-chan string {
	req, _ := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 100)
	go func() {
		defer res.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "event: "); ok {
				name = n
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				out <- name + " " + d
			}
		}
	}()
	return out
}

func TestTheStreamSendsTheStateThenOnlyWhatChanged(t *testing.T) {
	c, _, srv := setup(t, console.Config{})
	ctx := ctxT(t)
	k := key(t, "a")
	ev := events(t, srv)
	if first := <-ev; !strings.HasPrefix(first, "state ") {
		t.Fatalf("first event %q, want the state", first)
	}
	l, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	next := func(prefix string) string {
		for {
			select {
			case e := <-ev:
				if strings.HasPrefix(e, prefix) {
					return e
				}
				if strings.HasPrefix(e, "row ") {
					t.Fatalf("unexpected row event %q while waiting for %q", e, prefix)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no %q within 20 s", prefix)
			}
		}
	}
	next(`row {"key":"` + k + `","kind":"lock"`)
	// Nothing changes for a held lock with a minute to go: no row is sent.
	quiet := time.After(time.Second)
	for waiting := true; waiting; {
		select {
		case e := <-ev:
			if strings.HasPrefix(e, "row ") {
				t.Fatalf("a row was sent with nothing changed: %q", e)
			}
		case <-quiet:
			waiting = false
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next(`row {"key":"` + k + `","kind":"","held":false`)
}

// A renewal changes nothing on the page but a TTL: it is sent in a "ttl"
// event with the other renewals, never as a row to draw again.
func TestARenewalSendsATTLNotARow(t *testing.T) {
	c, _, srv := setup(t, console.Config{})
	ctx := ctxT(t)
	k := key(t, "renewed")
	ev := events(t, srv)
	if first := <-ev; !strings.HasPrefix(first, "state ") {
		t.Fatalf("first event %q, want the state", first)
	}
	l, err := c.TryLock(ctx, k, dlock.WithTTL(time.Second), dlock.WithAutoRenew()) // renewed every 333 ms
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	rows, ttls := 0, 0
	for end := time.After(3 * time.Second); ttls < 3; {
		select {
		case e := <-ev:
			switch {
			case strings.HasPrefix(e, `row {"key":"`+k+`"`):
				if rows++; rows > 1 {
					t.Fatalf("a renewal sent the row again: %q", e)
				}
			case strings.HasPrefix(e, "ttl ") && strings.Contains(e, `"`+k+`":`):
				var m map[string]int64
				if err := json.Unmarshal([]byte(strings.TrimPrefix(e, "ttl ")), &m); err != nil || m[k] <= 0 || m[k] > 1000 {
					t.Fatalf("the ttl event %q: want the key's TTL now, 1 to 1000 ms", e)
				}
				ttls++
			}
		case <-end:
			t.Fatalf("in 3 s of renewals: %d row events, %d ttl events naming the key; want 1 and at least 3", rows, ttls)
		}
	}
}

func TestRevokeNeedsToBeEnabledTheOriginTheCSRFTokenAndAuthorization(t *testing.T) {
	if _, err := console.New(console.Config{Locks: dlock.New(server.Client(t)), Nodes: []redis.UniversalClient{server.Client(t)}, Revoke: true}); !errors.Is(err, console.ErrConfig) {
		t.Fatalf("Revoke without Authorize: %v, want ErrConfig", err)
	}
	authorize := func(r *http.Request) (string, bool) {
		u, p, ok := r.BasicAuth()
		return u, ok && u == "ops" && p == "secret"
	}
	for _, enabled := range []bool{false, true} {
		t.Run(fmt.Sprint("enabled=", enabled), func(t *testing.T) {
			c, rdb, srv := setup(t, console.Config{Revoke: enabled, Authorize: authorize, Auth: "basic"})
			ctx := ctxT(t)
			k := key(t, "stuck")
			l, err := c.TryLock(ctx, k, dlock.WithTTL(time.Second), dlock.WithAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(ctx)
			st := until(t, srv, "the lock", func(st state) bool { return row(st, k) != nil })
			holder := row(st, k).Holds[0].Holder
			page, _ := http.Get(srv.URL + "/")
			html, _ := io.ReadAll(page.Body)
			page.Body.Close()
			csrf := strings.SplitN(strings.SplitN(string(html), `name="csrf-token" content="`, 2)[1], `"`, 2)[0]
			graceMS := int64(5000)
			post := func(token, site string, auth bool) (int, string) {
				body := fmt.Sprintf(`{"key":%q,"holder":%q,"reason":"wedged","grace_ms":%d}`, k, holder, graceMS)
				req, _ := http.NewRequest("POST", srv.URL+"/api/revoke", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-CSRF-Token", token)
				req.Header.Set("Sec-Fetch-Site", site)
				if auth {
					req.SetBasicAuth("ops", "secret")
				} else {
					req.SetBasicAuth("ops", "wrong")
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			if !enabled {
				if code, body := post(csrf, "same-origin", true); code != http.StatusForbidden {
					t.Fatalf("revoke on a read-only console: %d %s", code, body)
				}
				if l.Context().Err() != nil {
					t.Fatal("the lock was revoked by a read-only console")
				}
				return
			}
			for _, bad := range []struct {
				token, site string
				auth        bool
				code        int
			}{
				{csrf, "cross-site", true, http.StatusForbidden},
				{"", "same-origin", true, http.StatusForbidden},
				{"x" + csrf[1:], "same-origin", true, http.StatusForbidden},
				{csrf, "same-origin", false, http.StatusUnauthorized},
			} {
				if code, body := post(bad.token, bad.site, bad.auth); code != bad.code {
					t.Fatalf("%+v: %d %s, want %d", bad, code, body, bad.code)
				}
			}
			// A grace above dlock.MaxGrace, or one whose milliseconds overflow
			// a Duration, is refused, not turned into a revoke that does nothing.
			for _, g := range []int64{-1, dlock.MaxGrace.Milliseconds() + 1, math.MaxInt64, 18446744073710} {
				graceMS = g
				if code, body := post(csrf, "same-origin", true); code != http.StatusBadRequest {
					t.Fatalf("grace_ms %d: %d %s, want 400", g, code, body)
				}
			}
			graceMS = 5000
			if l.Context().Err() != nil {
				t.Fatal("a refused request revoked the lock")
			}
			if code, body := post(csrf, "same-origin", true); code != http.StatusOK || !strings.Contains(body, holder) {
				t.Fatalf("an authorized revoke: %d %s", code, body)
			}
			if !errors.Is(context.Cause(l.Context()), dlock.ErrRevoked) || !strings.Contains(context.Cause(l.Context()).Error(), "by ops: wedged") {
				t.Fatalf("the holder's cause: %v", context.Cause(l.Context()))
			}
			until(t, srv, "the audit entry", func(st state) bool {
				for _, a := range st.Audit {
					if a.Fields["key"] == k && a.Fields["event"] == "revoke" && a.Fields["reason"] == "wedged" && strings.HasPrefix(a.Fields["by"], "ops") {
						return true
					}
				}
				return false
			})
			_ = rdb
		})
	}
}

// readOnlyACL is the ACL SETUSER line docs/console.md gives for a console
// without revoke, its password ro-pass.
func readOnlyACL(t *testing.T) []any {
	t.Helper()
	doc, err := os.ReadFile("../docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(doc), "## A read-only Redis user for the console")
	_, block, _ := strings.Cut(after, "```\n")
	block, _, _ = strings.Cut(block, "```")
	var acl []any
	for _, f := range strings.Fields(strings.ReplaceAll(block, "\\\n", " ")) {
		acl = append(acl, strings.Replace(f, ">PASSWORD", ">ro-pass", 1))
	}
	if len(acl) < 4 || acl[0] != "ACL" || acl[2] != "console-ro" {
		t.Fatalf("docs/console.md's read-only ACL: %q", acl)
	}
	return acl
}

func TestTheConsoleWorksWithAReadOnlyACLUser(t *testing.T) {
	admin := server.Client(t)
	ctx := ctxT(t)
	if err := admin.Do(ctx, readOnlyACL(t)...).Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(context.Background(), "ACL", "DELUSER", "console-ro")
	// Nothing that could stop the server: no script (an endless one is
	// BUSY for every client), no CLIENT PAUSE. Asked with ACL DRYRUN first:
	// run, a permitted endless script would freeze the test server.
	for _, cmd := range [][]any{{"EVAL", "while true do end", "0"}, {"EVALSHA", "0123456789012345678901234567890123456789", "0"},
		{"FCALL", "f", "0"}, {"CLIENT", "PAUSE", "60000"}, {"SCRIPT", "LOAD", "while true do end"}, {"FUNCTION", "LOAD", "x"}} {
		if said, err := admin.Do(ctx, append([]any{"ACL", "DRYRUN", "console-ro"}, cmd...)...).Text(); err != nil || said == "OK" {
			t.Fatalf("the read-only user may run %q: ACL DRYRUN says %q, %v", cmd, said, err)
		}
	}
	opts := server.Options()
	opts.Username, opts.Password = "console-ro", "ro-pass"
	ro := redis.NewClient(opts)
	defer ro.Close()
	c := dlock.New(admin)
	defer c.Close()
	k := key(t, "held")
	l, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute), dlock.WithOwner(dlock.Owner{Label: "acl"}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	p, err := c.Semaphore(key(t, "sem"), 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock(ctx)
	rl, err := c.RWMutex(key(t, "rw")).TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Unlock(ctx)
	if err := console.Check(ctx, []redis.UniversalClient{ro}, key(t, "*")); err != nil {
		t.Fatalf("Check refuses the documented read-only user: %v", err)
	}
	roLocks := dlock.New(ro)
	defer roLocks.Close()
	con, err := console.New(console.Config{Locks: roLocks, Nodes: []redis.UniversalClient{ro}, Pattern: key(t, "*"), Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	defer func() { srv.Close(); con.Close() }()
	st := until(t, srv, "every kind, read by the read-only user", func(st state) bool {
		r, s, rw := row(st, k), row(st, key(t, "sem")), row(st, key(t, "rw"))
		return r != nil && len(r.Holds) == 1 && r.Holds[0].Owner != nil && s != nil && s.Held && rw != nil && rw.Held
	})
	for _, r := range st.Rows {
		if r.Error != "" {
			t.Fatalf("row %s: %s", r.Key, r.Error)
		}
	}
	if r := row(st, k); r.Error != "" || r.Holds[0].Owner.Label != "acl" {
		t.Fatalf("row %+v", r)
	}
	if err := ro.Set(ctx, k, "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("the read-only user could write: %v", err)
	}
	if err := ro.Eval(ctx, "while true do end", nil).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("the read-only user's endless script: %v, want NOPERM", err)
	}
}

// On Redlock (three masters) and on a Cluster, rows show what a majority
// holds and follow a release.
func TestTheConsoleOnRedlockAndOnACluster(t *testing.T) {
	for _, topology := range []string{"redlock", "cluster"} {
		t.Run(topology, func(t *testing.T) {
			var nodes []redis.UniversalClient
			var c *dlock.Client
			switch topology {
			case "redlock":
				var rdbs []*redis.Client
				for range 3 {
					rdb := redistest.Start(t).Client(t)
					rdbs, nodes = append(rdbs, rdb), append(nodes, rdb)
				}
				c = dlock.New(rdbs...)
			case "cluster":
				cc := redistest.StartCluster(t, 3).Client(t)
				nodes, c = []redis.UniversalClient{cc}, dlock.New(cc)
			}
			defer c.Close()
			con, err := console.New(console.Config{Locks: c, Nodes: nodes, Pattern: "t:*", Interval: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(con)
			defer func() { srv.Close(); con.Close() }()
			ctx := ctxT(t)
			var locks []*dlock.Lock
			for _, name := range []string{"a", "b", "c", "{tag}d"} {
				l, err := c.TryLock(ctx, key(t, name), dlock.WithTTL(time.Minute), dlock.WithNodeTimeout(time.Second),
					dlock.WithOwner(dlock.Owner{Label: name}))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			until(t, srv, "every lock, with its owner", func(st state) bool {
				for _, l := range locks {
					r := row(st, l.Key())
					if r == nil || !r.Held || r.Fence < l.Fence() || len(r.Holds) != 1 || r.Holds[0].Owner == nil {
						return false
					}
				}
				return true
			})
			if err := locks[0].Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			until(t, srv, "the release", func(st state) bool { r := row(st, locks[0].Key()); return r != nil && !r.Held })
			for _, l := range locks[1:] {
				_ = l.Unlock(ctx)
			}
		})
	}
}

func TestTheConsoleShowsOnlyDlocksKeysAndSaysWhatItCannotRead(t *testing.T) {
	c, rdb, srv := setup(t, console.Config{Limit: 3})
	ctx := ctxT(t)
	user := key(t, "session")
	rdb.Set(ctx, user, "SECRETapikey-0123456789", 0) // a key of the user's that matches the pattern
	var locks []*dlock.Lock
	for _, name := range []string{"a", "b", "c"} { // each with a fence counter: dlock:* keys the limit must not count
		l, err := c.TryLock(ctx, key(t, name), dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		locks = append(locks, l)
	}
	_ = rdb.Del(ctx, user)
	until(t, srv, "every lock, within the limit", func(st state) bool { return len(st.Rows) == 3 })
	rdb.Set(ctx, user, "SECRETapikey-0123456789", 0)
	time.Sleep(500 * time.Millisecond)
	if st, body := get(t, srv); row(st, user) != nil || strings.Contains(body, "SECRET") {
		t.Fatalf("the user's key is shown:\n%s", body)
	}
	// A console whose user may not read says so, rather than "no locks".
	opts := server.Options()
	opts.Username, opts.Password = "nobody", "wrong-pass"
	wrong := redis.NewClient(opts)
	defer wrong.Close()
	srv2 := serve(t, console.Config{Locks: c, Nodes: []redis.UniversalClient{wrong}})
	st := until(t, srv2, "the problem reported", func(st state) bool { return len(st.Problems) > 0 })
	if strings.Contains(strings.Join(st.Problems, " "), "wrong-pass") {
		t.Fatalf("a problem shows the password: %q", st.Problems)
	}
}

// Past its Limit, the console says that the list is cut short and how
// many keys match: all of them, or at least ten times the Limit.
func TestTheStateSaysWhenTheLimitCutsTheListShort(t *testing.T) {
	for _, tc := range []struct {
		limit, locks int
		want         console.Cut
	}{
		{5, 5, console.Cut{}},
		{3, 7, console.Cut{Limit: 3, Found: 7}},
		{1, 12, console.Cut{Limit: 1, Found: 10, AtLeast: true}},
	} {
		t.Run(fmt.Sprint(tc.limit, "of", tc.locks), func(t *testing.T) {
			c, _, srv := setup(t, console.Config{Limit: tc.limit})
			ctx := ctxT(t)
			for i := range tc.locks {
				l, err := c.TryLock(ctx, key(t, fmt.Sprint(i)), dlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Unlock(ctx)
			}
			if tc.want != (console.Cut{}) {
				until(t, srv, fmt.Sprintf("%d rows and %+v", tc.limit, tc.want), func(st state) bool {
					return len(st.Rows) >= tc.limit && st.Cut != nil && *st.Cut == tc.want
				})
				return
			}
			until(t, srv, "every row", func(st state) bool { return len(st.Rows) == tc.locks })
			time.Sleep(300 * time.Millisecond) // three scans more
			if st, body := get(t, srv); st.Cut != nil {
				t.Fatalf("every key is shown, yet the state says the list is cut:\n%s", body)
			}
		})
	}
}

func TestTheConsoleRefusesOtherHosts(t *testing.T) {
	_, _, srv := setup(t, console.Config{Hosts: []string{"127.0.0.1", "localhost"}})
	for host, want := range map[string]int{"attacker.example:7070": http.StatusForbidden, "localhost:1234": http.StatusOK, "127.0.0.1": http.StatusOK} {
		req, _ := http.NewRequest("GET", srv.URL+"/api/state", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
}

func TestARevokeWhosePageLeftStillEnds(t *testing.T) {
	authorize := func(r *http.Request) (string, bool) { return "ops", true }
	c, rdb, srv := setup(t, console.Config{Revoke: true, Authorize: authorize})
	ctx := ctxT(t)
	k := key(t, "stuck")
	l, err := c.TryLock(ctx, k, dlock.WithTTL(20*time.Second)) // never renews: removed after the grace
	if err != nil {
		t.Fatal(err)
	}
	st := until(t, srv, "the lock", func(st state) bool { return row(st, k) != nil })
	page, _ := http.Get(srv.URL + "/")
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	csrf := strings.SplitN(strings.SplitN(string(html), `name="csrf-token" content="`, 2)[1], `"`, 2)[0]
	body := fmt.Sprintf(`{"key":%q,"holder":%q,"reason":"left","grace_ms":1000}`, k, row(st, k).Holds[0].Holder)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(short, "POST", srv.URL+"/api/revoke", strings.NewReader(body))
	req.Header.Set("X-CSRF-Token", csrf)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatal("the revoke answered before its grace")
	}
	for end := time.Now().Add(20 * time.Second); rdb.Get(ctx, k).Val() != ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the hold is still there after the grace: the revoke ended with its request")
		}
	}
	_ = l
}

// While Redis does not answer, every page that opens is told, from its
// first state on; and the banner clears when Redis is back.
func TestEveryPageOpenedDuringAnOutageIsToldOfIt(t *testing.T) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout, opts.DialTimeout, opts.MaxRetries = 700*time.Millisecond, 700*time.Millisecond, -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	srv := serve(t, console.Config{Locks: c, Nodes: []redis.UniversalClient{rdb}})
	problems := func() []string { st, _ := get(t, srv); return st.Problems }
	s.Pause()
	for end := time.Now().Add(20 * time.Second); len(problems()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			s.Resume()
			t.Fatal("no problem reported while Redis is paused")
		}
	}
	for i := range 120 {
		if len(problems()) == 0 {
			s.Resume()
			t.Fatalf("poll %d during the outage: no problem reported", i)
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.Resume()
	for end := time.Now().Add(20 * time.Second); len(problems()) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the problem is still reported after Redis is back")
		}
	}
}

// Closing the go-redis client before the console (defers run in reverse:
// the usual order when the client was made first) is not a crash.
func TestClosingTheRedisClientFirstIsNotACrash(t *testing.T) {
	rdb := redis.NewClient(server.Options())
	c := dlock.New(rdb)
	con, err := console.New(console.Config{Locks: c, Nodes: []redis.UniversalClient{rdb}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the subscription is made
	c.Close()
	rdb.Close()
	time.Sleep(200 * time.Millisecond)
	if err := con.Close(); err != nil {
		t.Fatal(err)
	}
}
