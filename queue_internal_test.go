package dlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tokens"
)

// heldOnANode starts a server and takes key on it as "holder" for a
// minute, through a bare node, so that a test can drive the queue's
// scripts directly.
func heldOnANode(t *testing.T, key string) (*redis.Client, *node, *lockNames) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	n := newNode(rdb, 0)
	nm := namesOf(key)
	if g, err := n.acquire(context.Background(), nm, "holder", options{ttl: time.Minute}, false); err != nil || !g.ok {
		t.Fatal(g, err)
	}
	return rdb, n, nm
}

// A waiter that could not use its grant joins again with its score: if the
// key still holds its token, the join confirms the grant for its whole
// TTL; if the grant lapsed, the waiter is back at the head of the line,
// ahead of those who queued after it.
func TestARefusedGrantKeepsItsPlace(t *testing.T) {
	const k = "lock:keep-place"
	rdb, n, nm := heldOnANode(t, k)
	ctx := context.Background()
	a := &queuedWaiter{id: "a", token: "tok-a", o: options{ttl: time.Minute}}
	b := &queuedWaiter{id: "b", token: "tok-b", o: options{ttl: time.Minute}}
	ra, err := n.join(ctx, nm, a, "ga", 1, "0")
	if err != nil || ra.granted || ra.score == "" {
		t.Fatalf("a's join: %+v %v", ra, err)
	}
	if rb, err := n.join(ctx, nm, b, "gb", 1, "0"); err != nil || rb.granted {
		t.Fatalf("b's join: %+v %v", rb, err)
	}
	if ok, err := releaseOn(ctx, n, nm, "holder", 0, 0, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != "tok-a" {
		t.Fatalf("the hand-off went to %q, want a", got)
	}
	// Too late to use: a joins again while the key still holds its token.
	rdb.PExpire(ctx, k, 50*time.Millisecond)
	r, err := n.join(ctx, nm, a, "ga", 2, ra.score)
	if err != nil || !r.granted || r.px != a.o.ttl {
		t.Fatalf("confirming join: %+v %v, want granted for the whole TTL", r, err)
	}
	if pttl := rdb.PTTL(ctx, k).Val(); pttl < a.o.ttl/2 {
		t.Fatalf("PTTL %v after the confirming join", pttl)
	}
	// Lapsed: the key expired before a joined again. a queues ahead of b.
	rdb.Del(ctx, k)
	r, err = n.join(ctx, nm, a, "ga", 3, ra.score)
	if err != nil || !r.granted {
		t.Fatalf("rejoin after the grant lapsed: %+v %v, want a, first in line, to take the free lock", r, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != "tok-a" {
		t.Fatalf("the key holds %q, want a's token", got)
	}
	if head := rdb.ZRange(ctx, "dlock:queue:{"+k+"}", 0, 0).Val(); len(head) != 1 || head[0] != "b" {
		t.Fatalf("queue head %v, want b still in line", head)
	}
}

// The lease of a hand-off counts from the group's step it names, plus the
// time the server saw pass since that step.
func TestAHandOffsLeaseCountsFromTheGroupsStep(t *testing.T) {
	const k = "lock:lease"
	rdb, n, nm := heldOnANode(t, k)
	ctx := context.Background()
	w := &queuedWaiter{id: "w", token: "tok-w", o: options{ttl: 100 * time.Millisecond}}
	if r, err := n.join(ctx, nm, w, "g", 7, "0"); err != nil || r.granted {
		t.Fatal(r, err)
	}
	time.Sleep(200 * time.Millisecond)
	if ok, err := releaseOn(ctx, n, nm, "holder", 0, 0, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	rec := rdb.HGet(ctx, "dlock:waiters:{"+k+"}", "!").Val()
	// The record is "group id token fence seq lease px"; the message the
	// same without group and token.
	id, h, ok := parseGrant("g w " + rec[len("g w tok-w "):])
	if !ok || id != "w" {
		t.Fatalf("grant record %q", rec)
	}
	if h.seq != 7 || h.lease < 300*time.Millisecond || h.lease > 2*time.Second || h.px != 100*time.Millisecond {
		t.Fatalf("grant %+v: want step 7 and a lease of the 200 ms since it plus the 100 ms TTL", h)
	}
}

// A release that hands the lock to a waiter returns the grant, and the
// releasing Client hands it over to its own waiter at once. Such a grant
// is not published: the reply is its only message.
func TestAReleaseHandsOverToItsOwnClientsWaiter(t *testing.T) {
	s := redistest.Start(t)
	admin := s.Client(t)
	c := New(s.Client(t))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const k = "lock:hand-over"
	holder, err := c.Lock(ctx, k, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := lockingAsync(t, ctx, c, k)
	for !c.groups.waiting(k) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // its join has landed
	published := func() string { return redistest.Info(admin, "commandstats")["cmdstat_publish"] }
	before := published()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil || l.Fence() <= holder.Fence() {
		t.Fatalf("the waiter got %v after fence %d", l, holder.Fence())
	}
	if after := published(); after != before {
		t.Errorf("the grant was published too (%q, then %q): the reply carried it", before, after)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter's first join makes the queue, and the queue expires like the
// waiters' hash if its group never takes another step (a process that dies
// just after joining): nothing it leaves is kept forever.
func TestTheQueueAFirstJoinMakesExpires(t *testing.T) {
	const k = "lock:first-join"
	rdb, n, nm := heldOnANode(t, k)
	ctx := context.Background()
	w := &queuedWaiter{id: "a", token: "tok-a", o: options{ttl: time.Minute}}
	if r, err := n.join(ctx, nm, w, "ga", 1, "0"); err != nil || r.granted {
		t.Fatalf("join: %+v %v", r, err)
	}
	for _, key := range nm.all[2:4] { // the queue and the waiters
		if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 || pttl > 2*aliveWindow {
			t.Fatalf("%s: PTTL %v after the first join, want within %v", key, pttl, 2*aliveWindow)
		}
	}
}

// parseGrant reads exactly the hand-off message the scripts publish and
// refuses anything else ("released", a malformed or fenceless grant).
func TestParseGrant(t *testing.T) {
	id, h, ok := parseGrant("g w1 1700000000000001 7 950 900")
	if !ok || id != "w1" || h.fence != 1700000000000001 || h.seq != 7 || h.lease != 950*time.Millisecond || h.px != 900*time.Millisecond {
		t.Fatalf("parseGrant: %q %+v %v", id, h, ok)
	}
	for _, bad := range []string{"", "g", "released", "g w1 0 7 950 900", "g w1 x 7 950 900", "g w1 5 7 950", "x w1 5 7 950 900", "g w1 5 7 950 900 extra", "g w1 5 7 950 x"} {
		if _, _, ok := parseGrant(bad); ok {
			t.Errorf("parseGrant(%q) accepted", bad)
		}
	}
}

// A waiter whose Client holds the key through its line defers its join
// until that holder's release begins: it is not in line before, giving up
// then leaves nothing behind, its place is that of its join, behind
// another Client's waiter that joined meanwhile, and one whose context
// ends before the deferral would joins at once.
func TestAJoinBehindItsClientsHolderWaitsForTheRelease(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	c, other := New(rdb), New(rdb)
	defer other.Close()
	defer c.Close()
	c.groups.deferFor = time.Hour // only the release sends it
	const k = "lock:deferred-join"
	queued := func() int64 { return rdb.ZCard(ctx, namesOf(k).all[2]).Val() }
	deferred := func() int { return deferredOn(c, k) }
	first, err := other.TryLock(ctx, k, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 3)
	lock := func(c *Client, ctx context.Context) {
		l, err := c.Lock(ctx, k, WithTTL(time.Minute))
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- l
	}
	go lock(c, ctx)
	eventually(t, "c's first waiter is in line", func() bool { return queued() == 1 })
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held := <-got // granted through c's line: c now holds the key through it
	if held == nil {
		t.Fatal("c's first waiter got no lock")
	}

	// One that gives up while it defers.
	quitCtx, quit := context.WithCancel(ctx)
	go lock(c, quitCtx)
	eventually(t, "a waiter defers", func() bool { return deferred() == 1 })
	quit()
	if l := <-got; l != nil {
		t.Fatal("a waiter whose context ended got the lock")
	}

	// One that stays, and another Client's waiter that comes after it.
	go lock(c, ctx)
	eventually(t, "a waiter defers", func() bool { return deferred() == 1 })
	if n := queued(); n != 0 {
		t.Fatalf("%d in line while c's waiter defers, want 0", n)
	}
	go lock(other, ctx)
	eventually(t, "the other Client's waiter is in line", func() bool { return queued() == 1 })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		t.Fatal("no lock after the release")
	}
	if next.c != other {
		t.Fatal("c's deferred waiter went ahead of the other Client's waiter, which joined first")
	}
	eventually(t, "c's waiter is in line", func() bool { return queued() == 1 })
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	last := <-got
	if last == nil || last.c != c {
		t.Fatal("c's waiter did not get the lock")
	}

	// c holds the key through its line again. A waiter whose context ends
	// before its deferral would joins at once: here, with the key lost
	// behind the holder's back, the join gets it (it would have waited).
	rdb.Del(ctx, k)
	soon, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := c.Lock(soon, k)
	if err != nil {
		t.Fatalf("a Lock whose context ends before its deferral would, on a lost key: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// markAware is a token of the shape tokens.New makes (27 characters and the
// version tag), which tells the scripts that its holder reads the holder's
// mark (mark.lua).
func markAware(name string) string {
	return name + strings.Repeat("x", 27-len(name)) + "-v" + strconv.Itoa(tokens.Version)
}

// release_lean deletes a key only when its holder's mark says nobody waits
// or listens; when someone may, it changes nothing and answers 2, and
// release, asked to be lean, then runs the full release, which hands the
// lock on, or announces it, or clears a mark nobody needs any more.
func TestALeanReleaseLeavesAContendedKeyToTheFullOne(t *testing.T) {
	const k = "lock:lean"
	rdb := redistest.Start(t).Client(t)
	n, nm := newNode(rdb, 0), namesOf(k)
	ctx := context.Background()
	o := options{ttl: time.Minute}
	holder := markAware("holder")
	if g, err := n.acquire(ctx, nm, holder, o, false); err != nil || !g.ok {
		t.Fatal(g, err)
	}
	lean := func(token string) int64 {
		t.Helper()
		keys, _ := nm.leanReleaseKeys()
		v, err := releaseLeanScript.Run(ctx, rdb, keys, token).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := lean(markAware("not-the-holder")); v != 0 {
		t.Fatalf("another token's lean release: %d, want 0", v)
	}
	w := &queuedWaiter{id: "w", token: markAware("tok-w"), o: o}
	if r, err := n.join(ctx, nm, w, "gw", 1, "0"); err != nil || r.granted {
		t.Fatalf("join: %+v %v", r, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != holder+"+" {
		t.Fatalf("the key holds %q with a waiter in line, want the holder's token marked", got)
	}
	if ok, err := n.extend(ctx, nm, holder, time.Minute, time.Minute); err != nil || !ok.Extended {
		t.Fatalf("extending a marked holder: %v %v", ok, err)
	}
	if st, err := n.inspect(ctx, k, ""); err != nil || st.value != holder {
		t.Fatalf("inspect shows %q %v, want the token without its mark", st.value, err)
	}
	if v := lean(holder); v != leanWaited {
		t.Fatalf("lean release with a waiter in line: %d, want %d", v, leanWaited)
	}
	if got := rdb.Get(ctx, k).Val(); got != holder+"+" {
		t.Fatalf("the key holds %q after a lean release that found a waiter, want it unchanged", got)
	}
	if ok, err := releaseOn(ctx, n, nm, holder, 0, 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != w.token+"+" {
		t.Fatalf("the release went to %q, want the waiter, marked", got)
	}
	if ok, err := releaseOn(ctx, n, nm, w.token, 0, 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}

	// A listener without a queue (a Redlock waiter's attempt, which sets
	// the notify key) marks the holder too, and is left to the full
	// release, which tells it.
	holder2 := markAware("holder2")
	if g, err := n.acquire(ctx, nm, holder2, o, false); err != nil || !g.ok {
		t.Fatal(g, err)
	}
	if g, err := n.acquire(ctx, nm, markAware("listener"), o, true); err != nil || g.ok {
		t.Fatalf("a listener's attempt on a held key: %+v %v", g, err)
	}
	if v := lean(holder2); v != leanWaited {
		t.Fatalf("lean release with a listener: %d, want %d", v, leanWaited)
	}
	sub := rdb.Subscribe(ctx, nm.wake)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := releaseOn(ctx, n, nm, holder2, 0, 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "released" {
		t.Fatalf("the listener heard %v %v, want released", m, err)
	}

	// While it still listens, a new holder gets the holder's mark with
	// the key.
	holder3 := markAware("holder3")
	if g, err := n.acquire(ctx, nm, holder3, o, false); err != nil || !g.ok {
		t.Fatal(g, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != holder3+"+" {
		t.Fatalf("the key holds %q with a listener, want the new holder's token marked", got)
	}
	if ok, err := releaseOn(ctx, n, nm, holder3, 0, 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}

	// The listener is gone, its counter's mark not yet: the next acquire
	// (the full one, on the marked counter) clears it, and the key's
	// release is lean.
	rdb.Del(ctx, nm.all[5])
	holder4 := markAware("holder4")
	if g, err := n.acquire(ctx, nm, holder4, o, false); err != nil || !g.ok {
		t.Fatal(g, err)
	}
	if c := rdb.Get(ctx, nm.fence()).Val(); strings.HasPrefix(c, "+") {
		t.Fatalf("the counter is %q after an acquire that found nobody, want its mark cleared", c)
	}
	if v := lean(holder4); v != 1 || rdb.Exists(ctx, k).Val() != 0 {
		t.Fatalf("lean release of an uncontended key: %d, key left: %d", v, rdb.Exists(ctx, k).Val())
	}
}

// A waiter marks only a holder whose token has tokens.New's shape and this
// protocol version: it leaves a token of another version as it is, and so
// is a value of any other shape, which dlock did not write. The Go side's
// rule, which decides whether a release may be lean, is the same.
func TestAWaiterMarksOnlyAHolderThatReadsTheMark(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	n, ctx := newNode(rdb, 0), context.Background()
	a27 := strings.Repeat("a", 27)
	for _, c := range []struct {
		value string
		marks bool
	}{
		{a27 + "-v1", true},
		{a27 + "-v1.Y2FuZGlkYXRl", true}, // a campaign's token, with its value
		{"Zk3-Q9_Lw2Rt7vBn4Hc8Jd1Fs6G-v1", true},
		{a27 + "-v2", false}, // another version's token
		{a27 + "-v12", false},
		{a27, false},
		{a27 + ".Y2FuZGlkYXRl", false},
		{strings.Repeat("b", 28), false},
		{strings.Repeat("b", 29), false},
		{"tok-old", false},
		{a27 + "+x", false},
		{a27 + "-v1x", false},
		{strings.Repeat("a", 26) + "-v1", false},
		{strings.Repeat("a", 28) + "-v1", false},
		{strings.Repeat("a", 26) + "!-v1", false},
		{"worker-0123456789-abcdefghij.pod.cluster.local", false},
		{"Zk3mQ9xLw2Rt7vBn4Hc8Jd1Fs6Gp", false},
		{strings.Repeat("a", 28) + ".node1", false},
		{"", false},
	} {
		k := "lock:mark-rule:" + c.value
		nm := namesOf(k)
		rdb.Set(ctx, k, c.value, time.Minute)
		w := &queuedWaiter{id: "w", token: markAware("tok-w"), o: options{ttl: time.Minute}}
		if r, err := n.join(ctx, nm, w, "gw", 1, "0"); err != nil || r.granted {
			t.Fatalf("join behind %q: %+v %v", c.value, r, err)
		}
		want := c.value
		if c.marks {
			want += "+"
		}
		if got := rdb.Get(ctx, k).Val(); got != want {
			t.Errorf("a waiter turned the holder's value %q into %q, want %q", c.value, got, want)
		}
		if c := rdb.Get(ctx, nm.fence()).Val(); !strings.HasPrefix(c, "+") {
			t.Errorf("the counter is %q with a waiter queued, want it marked", c)
		}
		if got := readsHolderMark(c.value); got != c.marks {
			t.Errorf("readsHolderMark(%q) = %v, the scripts say %v", c.value, got, c.marks)
		}
	}
}

// A release of a token whose holder does not read the holder's mark (an
// older version's, given to Attach) is never lean: its waiters marked the
// counter alone, and the full release hands the lock on at once.
func TestAnOlderVersionsTokenIsReleasedByTheFullRelease(t *testing.T) {
	const k = "lock:attached-old"
	rdb := redistest.Start(t).Client(t)
	n, nm, ctx := newNode(rdb, 0), namesOf(k), context.Background()
	old := strings.Repeat("o", 27)
	rdb.Set(ctx, k, old, time.Minute)
	w := &queuedWaiter{id: "w", token: markAware("tok-w"), o: options{ttl: time.Minute}}
	if r, err := n.join(ctx, nm, w, "gw", 1, "0"); err != nil || r.granted {
		t.Fatalf("join: %+v %v", r, err)
	}
	if ok, err := releaseOn(ctx, n, nm, old, 0, 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != w.token+"+" {
		t.Fatalf("the key holds %q after the release, want it handed to the waiter", got)
	}
}

// A waiter marks the key's fencing counter (mark.lua). While it is
// queued, a newcomer that finds the key free is sent by acquire_lean's
// -3 to the full acquire, which refuses it (-2: the line goes first)
// without touching the key; once the line is empty, the full acquire
// grants the key and clears the mark, and the next lock is lean again.
// The fences keep growing across marked and unmarked counters.
func TestTheCounterMarkKeepsNewcomersBehindTheLine(t *testing.T) {
	const k = "lock:mark"
	rdb, n, nm := heldOnANode(t, k)
	ctx := context.Background()
	o := options{ttl: time.Minute}
	keys, _ := nm.leanKeys()
	leanAcquire := func(token string) any {
		t.Helper()
		v, err := acquireLeanScript.Run(ctx, rdb, keys, token, "60000", "120000").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	w := &queuedWaiter{id: "w", token: "tok-w", o: o}
	if r, err := n.join(ctx, nm, w, "gw", 1, "0"); err != nil || r.granted {
		t.Fatalf("join: %+v %v", r, err)
	}
	if c := rdb.Get(ctx, nm.fence()).Val(); !strings.HasPrefix(c, "+") {
		t.Fatalf("the counter is %q with a waiter queued, want it marked", c)
	}
	marked, _ := rdb.Get(ctx, nm.fence()).Int64() // "+123" reads as 123

	// The holder's key is gone (deleted by hand, or expired): the key is
	// free, and the waiter is still in line.
	rdb.Del(ctx, k)
	if v := leanAcquire("newcomer"); v != int64(leanMarked) || rdb.Exists(ctx, k).Val() != 0 {
		t.Fatalf("acquire_lean on a free key with a waiter in line: %v, key left: %d", v, rdb.Exists(ctx, k).Val())
	}
	if g, err := n.acquire(ctx, nm, "newcomer", o, false); err != nil || g.ok {
		t.Fatalf("a newcomer's acquire with a waiter in line: %+v %v, want refused", g, err)
	}
	if rdb.Exists(ctx, k).Val() != 0 || rdb.ZCard(ctx, nm.all[2]).Val() != 1 {
		t.Fatal("the refused newcomer changed the key or the line")
	}

	// The waiter leaves; its mark stays until an acquire finds the line
	// empty, which grants the key and clears the mark.
	if _, err := n.leave(ctx, nm, w.token, w.id); err != nil {
		t.Fatal(err)
	}
	g, err := n.acquire(ctx, nm, "newcomer", o, false)
	if err != nil || !g.ok || g.fence <= marked {
		t.Fatalf("acquire after the line emptied: %+v %v, want a grant with a fence above %d", g, err, marked)
	}
	if c := rdb.Get(ctx, nm.fence()).Val(); strings.HasPrefix(c, "+") {
		t.Fatalf("the counter is %q after a grant that found nobody waiting, want its mark cleared", c)
	}
	if ok, err := releaseOn(ctx, n, nm, "newcomer", 0, 0, true); err != nil || !ok {
		t.Fatal(ok, err)
	}
	fence, ok := leanAcquire("next").(string)
	if !ok {
		t.Fatal("acquire_lean on an unmarked, free key granted nothing")
	}
	if f, _ := strconv.ParseInt(fence, 10, 64); f <= g.fence {
		t.Fatalf("fence %s after %d, want it higher", fence, g.fence)
	}
}

// With a fence margin of 0 the counter would expire with the lock: while
// someone waits, the counter (and so its mark) is kept at least as long as
// the queue, by each step of a waiter and by a grant made while the
// counter is marked, so that a newcomer finds the mark when the holder's
// key expires (found by review: newcomers overtook a queued waiter in the
// moments between the expiry and the waiter's next step).
func TestAMarkOutlivesAShortLockWithoutMargin(t *testing.T) {
	const k = "lock:short-mark"
	rdb := redistest.Start(t).Client(t)
	n := newNode(rdb, 0)
	nm := namesOf(k)
	ctx := context.Background()
	short := options{ttl: 100 * time.Millisecond} // margin 0: the counter is kept 100 ms
	if g, err := n.acquire(ctx, nm, "holder", short, false); err != nil || !g.ok {
		t.Fatal(g, err)
	}
	for _, id := range []string{"a", "b"} {
		w := &queuedWaiter{id: id, token: "tok-" + id, o: short}
		if r, err := n.join(ctx, nm, w, "g"+id, 1, "0"); err != nil || r.granted {
			t.Fatalf("join %s: %+v %v", id, r, err)
		}
	}
	if p := rdb.PTTL(ctx, nm.fence()).Val(); p < time.Second {
		t.Fatalf("the counter expires in %v with waiters queued, want at least the queue's keep", p)
	}
	// The holder releases: a grant to a, made while the counter is marked,
	// keeps it for the queue too (b still waits).
	if ok, err := releaseOn(ctx, n, nm, "holder", 0, 0, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != "tok-a" {
		t.Fatalf("the release went to %q, want a", got)
	}
	if p := rdb.PTTL(ctx, nm.fence()).Val(); p < time.Second {
		t.Fatalf("the counter expires in %v after a grant with b queued, want at least the queue's keep", p)
	}
	// a's grant lapses (a crashed holder): a newcomer still meets the line.
	rdb.Del(ctx, k)
	if g, err := n.acquire(ctx, nm, "newcomer", short, false); err != nil || g.ok {
		t.Fatalf("a newcomer's acquire after the holder's key expired, b queued: %+v %v, want refused", g, err)
	}
}

// issue_fence issues a fence above the counter's number whatever the
// counter holds (absent, behind or ahead of the clock, marked or not), and
// leaves the counter at that fence, marked if it was or if the caller asks
// (a caller that works the queue), and then kept at least as long as the
// queue's keys and the notify key (notifyWindow, the longer).
func TestIssueFenceKeepsTheOrderAndTheMark(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	run := redis.NewScript(fenceSrc + `
local f, m = issue_fence(KEYS[1], ARGV[1], nil, ARGV[2] == '1')
return {f, tostring(m), redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`)
	ahead := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	for _, old := range []string{"", "5", "+5", ahead, "+" + ahead, "+0"} {
		for _, mark := range []string{"0", "1"} {
			const key = "dlock:fence:{k}"
			rdb.Del(ctx, key)
			if old != "" {
				rdb.Set(ctx, key, old, time.Minute)
			}
			res, err := run.Run(ctx, rdb, []string{key}, "100", mark).Slice()
			if err != nil {
				t.Fatal(err)
			}
			fence, _ := strconv.ParseInt(res[0].(string), 10, 64)
			last, _ := strconv.ParseInt(old, 10, 64)
			marked := strings.HasPrefix(old, "+") || mark == "1"
			if fence <= last || fence <= 0 {
				t.Errorf("counter %q, mark %s: fence %d, want above %d", old, mark, fence, last)
			}
			want := res[0].(string)
			if marked {
				want = "+" + want
			}
			if res[2] != want || res[1] != strconv.FormatBool(marked) {
				t.Errorf("counter %q, mark %s: left %v (marked %v), want %q", old, mark, res[2], res[1], want)
			}
			if pttl := res[3].(int64); marked && pttl < notifyWindow.Milliseconds()-100 || !marked && pttl > 100 {
				t.Errorf("counter %q, mark %s: kept %d ms", old, mark, pttl)
			}
		}
	}
}

// A listener's mark outlives a short grant and a fence raise: the counter
// of a marked key is kept at least as long as the notify key (found by
// review: a grant with a TTL plus margin under 3 s, or a Redlock release's
// raise, cut the counter's life short, and its mark expired while the
// listener still listened).
func TestAListenersMarkOutlivesAShortGrant(t *testing.T) {
	const k = "lock:listened-mark"
	rdb := redistest.Start(t).Client(t)
	n := newNode(rdb, 0)
	nm := namesOf(k)
	ctx := context.Background()
	short := options{ttl: 400 * time.Millisecond}
	rdb.Set(ctx, k, "A", 10*time.Second)
	if g, err := n.acquire(ctx, nm, "B", short, true); err != nil || g.ok {
		t.Fatalf("a listener's attempt on a held key: %+v %v", g, err)
	}
	rdb.Del(ctx, k)
	g, err := n.acquire(ctx, nm, "C", short, false)
	if err != nil || !g.ok {
		t.Fatalf("acquire of the free key: %+v %v", g, err)
	}
	check := func(when string) {
		t.Helper()
		c, p := rdb.Get(ctx, nm.fence()).Val(), rdb.PTTL(ctx, nm.fence()).Val()
		if !strings.HasPrefix(c, "+") || p < notifyWindow-500*time.Millisecond {
			t.Fatalf("%s: counter %q kept %v, want marked and kept about %v", when, c, p, notifyWindow)
		}
	}
	check("after a 400-ms grant with a listener")
	if ok, err := releaseOn(ctx, n, nm, "C", g.fence+1000, 300*time.Millisecond, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	check("after a release that raised the counter, keeping it 300 ms")
}

// releaseOn is node.release as a caller without waiters of its own sends
// it: whether it released.
func releaseOn(ctx context.Context, n *node, nm *lockNames, token string, fence int64, keep time.Duration, lean bool) (bool, error) {
	r, err := n.release(ctx, nm, token, fence, keep, lean, "", nil)
	return r.released, err
}
