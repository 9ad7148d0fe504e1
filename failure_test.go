package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A go-redis client with its default options ignores context deadlines; a
// paused server must still not hold the caller past its own deadline. And
// when the server comes back and grants the lock the caller gave up on,
// dlock releases it instead of leaving it to block everyone for the TTL.
func TestStalledServerHonoursTheDeadlineAndTheLateGrantIsReleased(t *testing.T) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout = 20 * time.Second // far beyond the caller's deadline
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	k := key(t)
	// Load the script first, so the stalled call is the acquire itself.
	mustLock(t, c, key(t))

	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryLock(ctx, k, dlock.WithTTL(time.Hour))
	returnedAfter := time.Since(start)
	s.Resume()

	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock on a paused server: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if returnedAfter >= 20*time.Second {
		t.Fatalf("TryLock returned after %v: it waited for the read timeout, not the deadline", returnedAfter)
	}
	// The server ran the acquire after it resumed; the lock must be
	// released well before its hour-long TTL.
	other, _ := newClient(t, s)
	eventually(t, "the late grant is released", func() bool {
		l, err := other.TryLock(ctxT(t), k)
		if err == nil {
			_ = l.Unlock(ctxT(t))
		}
		return err == nil
	})
}

// A go-redis read timeout is a failure, not contention; and since the server
// may have granted the lock after the client stopped listening, dlock
// releases it.
func TestReadTimeoutIsANodeErrorAndTheUncertainGrantIsReleased(t *testing.T) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout = 100 * time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	k := key(t)
	mustLock(t, c, key(t)) // load the script

	s.Pause()
	_, err := c.TryLock(context.Background(), k, dlock.WithTTL(time.Hour))
	s.Resume()
	assertNodeError(t, "TryLock", err)

	other, _ := newClient(t, s)
	eventually(t, "the uncertain grant is released", func() bool {
		l, err := other.TryLock(ctxT(t), k)
		if err == nil {
			_ = l.Unlock(ctxT(t))
		}
		return err == nil
	})
}

func TestKilledServerGivesNodeErrorsNotContention(t *testing.T) {
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	k := key(t)
	l := mustLock(t, c, k)
	s.Kill()

	_, err := c.TryLock(ctxT(t), key(t))
	assertNodeError(t, "TryLock", err)
	assertNodeError(t, "Unlock", l.Unlock(ctxT(t)))
	assertNodeError(t, "Extend", l.Extend(ctxT(t), time.Minute))
	_, err = l.TTL(ctxT(t))
	assertNodeError(t, "TTL", err)
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	_, err = c.Lock(ctx, k, dlock.WithFailFast())
	assertNodeError(t, "Lock with WithFailFast", err)

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "locking works again after restart", func() bool {
		_, err := c.TryLock(ctxT(t), k)
		return err == nil
	})
}

func assertNodeError(t *testing.T, op string, err error) {
	t.Helper()
	var ne *dlock.NodeError
	if !errors.As(err, &ne) {
		t.Errorf("%s against a dead server: %v, want a *NodeError", op, err)
		return
	}
	if errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("%s against a dead server: %v is mistaken for contention", op, err)
	}
	if ne.Node == "" || !strings.Contains(err.Error(), ne.Node) {
		t.Errorf("%s: error %q does not name the node", op, err)
	}
}

func TestReadOnlyReplicaIsAnErrorNotContention(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	c, _ := newClient(t, replica)
	_, err := c.TryLock(ctxT(t), key(t))
	if !redis.IsReadOnlyError(err) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock on a replica: %v, want a READONLY error, not ErrNotObtained", err)
	}
}

// readerClient returns a Client on s as an ACL user that may only read.
func readerClient(t *testing.T, s *redistest.Server) *dlock.Client {
	t.Helper()
	if err := s.Client(t).Do(ctxT(t), "ACL", "SETUSER", "reader", "on", ">pw", "~*", "+@read").Err(); err != nil {
		t.Fatal(err)
	}
	opts := s.Options()
	opts.Username, opts.Password = "reader", "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestMissingPermissionIsAnErrorNotContention(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	c := readerClient(t, redistest.Start(t))
	_, err := c.TryLock(ctxT(t), key(t))
	if !redis.HasErrorPrefix(errors.Unwrap(err), "NOPERM") || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock without permission: %v, want NOPERM, not ErrNotObtained", err)
	}
}

func TestOutOfMemoryIsAnErrorNotContention(t *testing.T) {
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	if err := rdb.ConfigSet(ctxT(t), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	k := key(t)
	_, err := c.TryLock(ctxT(t), k)
	if !redis.HasErrorPrefix(errors.Unwrap(err), "OOM") || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock on a full server: %v, want OOM, not ErrNotObtained", err)
	}
	rdb.ConfigSet(ctxT(t), "maxmemory", "0")
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Error("a refused acquire left the key set")
	}
}

func TestBadInputIsRefusedBeforeAnythingIsSent(t *testing.T) {
	c, rdb := newClient(t, shared())
	cases := map[string]struct {
		key  string
		opts []dlock.Option
	}{
		"empty key":       {"", nil},
		"reserved prefix": {"dlock:fence:{x}", nil},
		"zero TTL":        {key(t), []dlock.Option{dlock.WithTTL(0)}},
		"negative TTL":    {key(t), []dlock.Option{dlock.WithTTL(-time.Second)}},
		"TTL below min":   {key(t), []dlock.Option{dlock.WithTTL(dlock.MinTTL - time.Millisecond)}},
		"TTL above max":   {key(t), []dlock.Option{dlock.WithTTL(dlock.MaxTTL + time.Millisecond)}},
		"TTL overflowing": {key(t), []dlock.Option{dlock.WithTTL(1<<63 - 1)}},
	}
	for name, tc := range cases {
		for _, call := range []func() (*dlock.Lock, error){
			func() (*dlock.Lock, error) { return c.TryLock(ctxT(t), tc.key, tc.opts...) },
			func() (*dlock.Lock, error) { return c.Lock(ctxT(t), tc.key, tc.opts...) },
		} {
			if _, err := call(); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
		if tc.key != "" && rdb.Exists(ctxT(t), tc.key).Val() != 0 {
			t.Errorf("%s: key was set", name)
		}
	}

	l := mustLock(t, c, key(t))
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond, dlock.MaxTTL + 1} {
		if err := l.Extend(ctxT(t), ttl); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Extend(%v): %v, want ErrInvalidArgument", ttl, err)
		}
	}
	if pttl := rdb.PTTL(ctxT(t), l.Key()).Val(); pttl <= 0 {
		t.Errorf("after refused Extends the key's PTTL is %v", pttl)
	}
}

func TestABadNewCallPanicsAtOnceWithAnErrorThatSaysWhy(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": shared().Addr()}})
	t.Cleanup(func() { ring.Close() })
	twice := redis.NewClient(shared().Options())
	t.Cleanup(func() { twice.Close() })
	for name, c := range map[string]struct {
		new  func()
		want error
	}{
		"no clients":         {func() { dlock.New[redis.UniversalClient]() }, dlock.ErrInvalidArgument},
		"nil client":         {func() { dlock.New[redis.UniversalClient](nil) }, dlock.ErrInvalidArgument},
		"nil *Client":        {func() { dlock.New((*redis.Client)(nil)) }, dlock.ErrInvalidArgument},
		"nil in a slice":     {func() { dlock.New([]*redis.Client{shared().Client(t), nil}...) }, dlock.ErrInvalidArgument},
		"same client twice":  {func() { dlock.New(twice, twice) }, dlock.ErrInvalidArgument},
		"same address twice": {func() { dlock.New(twice, shared().Client(t)) }, dlock.ErrInvalidArgument},
		"a ring":             {func() { dlock.New(ring) }, errors.ErrUnsupported},
		"a wrapped ring":     {func() { dlock.New(wrappedRing{ring}) }, errors.ErrUnsupported},
	} {
		func() {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, c.want) {
					t.Errorf("%s: New panicked with %v, want an error matching %v", name, err, c.want)
				}
			}()
			c.new()
		}()
	}
}

type wrappedRing struct{ *redis.Ring }

func TestSentinelFailoverClientsOfDifferentMastersMakeARedlock(t *testing.T) {
	var rdbs []*redis.Client
	for _, name := range []string{"a", "b", "c"} {
		// No Sentinel is asked before the first command.
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: name, SentinelAddrs: []string{"127.0.0.1:1"}})
		t.Cleanup(func() { rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	dlock.New(rdbs...).Close() // go-redis names every one "FailoverClient": not the same node
}

func TestReplicaAckRefusesAGrantTheReplicaDidNotGet(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	c, rdb := newClient(t, master)
	ack := dlock.WithReplicaAck(1, time.Second) // generous; within half the client's 2s read timeout
	l, err := c.TryLock(ctxT(t), key(t), ack)
	if err != nil {
		t.Fatalf("TryLock with a healthy replica: %v", err)
	}
	_ = l.Unlock(ctxT(t))

	// Cut replication: the replica follows a master that is not there.
	if err := replica.Client(t).Do(ctxT(t), "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	k := key(t)
	_, err = c.TryLock(ctxT(t), k, ack)
	if !errors.Is(err, dlock.ErrNoReplicaAck) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock without a replica to ack: %v, want ErrNoReplicaAck", err)
	}
	// Given back before the refusal is returned: neither a retry nor
	// anyone else meets it (it was given back in the background once).
	short := dlock.WithReplicaAck(1, 20*time.Millisecond)
	for i := 0; i < 5; i++ {
		if n := rdb.Exists(ctxT(t), k).Val(); n != 0 {
			t.Fatalf("try %d: the unacknowledged grant is still held when the refusal came", i)
		}
		if _, err := c.TryLock(ctxT(t), k, short); !errors.Is(err, dlock.ErrNoReplicaAck) {
			t.Fatalf("try %d right after a refusal: %v, want ErrNoReplicaAck", i, err)
		}
	}
	// Lock waits on, as through any fault (a failover's new replica may be
	// about to ack), and its error says what it met.
	wait, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	defer cancel()
	if _, err := c.Lock(wait, k, ack); !errors.Is(err, dlock.ErrNoReplicaAck) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock without a replica to ack: %v, want its context's end carrying ErrNoReplicaAck", err)
	}
	if _, err := c.Lock(ctxT(t), k, ack, dlock.WithFailFast()); !errors.Is(err, dlock.ErrNoReplicaAck) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock WithFailFast without a replica to ack: %v, want ErrNoReplicaAck at once", err)
	}
	for _, bad := range []time.Duration{0, 1500 * time.Millisecond} { // zero; beyond the read timeout's reach
		if _, err := c.TryLock(ctxT(t), k, dlock.WithReplicaAck(1, bad)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("ack timeout %v: %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// A replica acknowledgement timeout that the go-redis client's read timeout
// cannot wait for is refused before anything is sent.
func TestTooLongAReplicaAckTimeoutIsRefusedBeforeAnythingIsSent(t *testing.T) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout = time.Second // blocking commands may wait 500 ms
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	admin := s.Client(t)
	_ = admin.ConfigResetStat(ctxT(t)).Err()
	for _, try := range []func() error{
		func() error {
			_, err := c.TryLock(ctxT(t), key(t), dlock.WithReplicaAck(1, 800*time.Millisecond))
			return err
		},
		func() error {
			_, err := c.Lock(ctxT(t), key(t), dlock.WithReplicaAck(1, 800*time.Millisecond))
			return err
		},
	} {
		if err := try(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("a replica-ack timeout beyond the read timeout: %v, want ErrInvalidArgument", err)
		}
	}
	if stats := admin.Info(ctxT(t), "commandstats").Val(); strings.Contains(stats, "cmdstat_evalsha") || strings.Contains(stats, "cmdstat_eval:") {
		t.Fatalf("scripts were sent: %s", stats)
	}
}

// A Client on a server whose memory policy may evict its keys says so,
// once, in its log; one on a server that cannot evict says nothing.
func TestAnEvictingServerIsWarnedOfOnce(t *testing.T) {
	s := redistest.Start(t, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru")
	var logs syncBuffer
	c := dlock.New(s.Client(t))
	defer c.Close()
	c.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	for range 3 {
		l := mustLock(t, c, key(t))
		_ = l.Unlock(ctxT(t))
	}
	eventually(t, "the warning", func() bool { return strings.Contains(logs.String(), "maxmemory-policy=allkeys-lru") })
	c.Close()
	if n := strings.Count(logs.String(), "may evict"); n != 1 {
		t.Fatalf("warned %d times:\n%s", n, logs.String())
	}

	var quiet syncBuffer
	q, _ := newClient(t, shared())
	q.SetLogger(slog.New(slog.NewTextHandler(&quiet, nil)))
	l := mustLock(t, q, key(t))
	_ = l.Unlock(ctxT(t))
	q.Close()
	if strings.Contains(quiet.String(), "evict") {
		t.Fatalf("warned of a server without a memory limit:\n%s", quiet.String())
	}
}

// A nil context panics in the caller's goroutine with a message that says
// so, before any other argument is looked at; a nil option is
// ErrInvalidArgument (found by review: LockAll, UnlockAll and a bad
// Semaphore returned ErrInvalidArgument for a nil context, and a nil
// option was ignored).
func TestANilContextPanicsAndANilOptionIsRefused(t *testing.T) {
	c, _ := newClient(t, shared())
	for name, call := range map[string]func(){
		"LockAll":              func() { _, _ = c.LockAll(nil, nil) },                    //nolint:staticcheck
		"UnlockAll":            func() { _ = c.UnlockAll(nil, nil) },                     //nolint:staticcheck
		"Semaphore.Acquire":    func() { _, _ = c.Semaphore(key(t), 0).Acquire(nil) },    //nolint:staticcheck
		"Semaphore.TryAcquire": func() { _, _ = c.Semaphore(key(t), 0).TryAcquire(nil) }, //nolint:staticcheck
		"TryLock":              func() { _, _ = c.TryLock(nil, "") },                     //nolint:staticcheck
		"Lock":                 func() { _, _ = c.Lock(nil, "") },                        //nolint:staticcheck
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil Context") {
					t.Errorf("%s(nil, ...): %v, want a panic that names the nil Context", name, r)
				}
			}()
			call()
		}()
	}
	if _, err := c.TryLock(ctxT(t), key(t), nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a nil option: %v, want ErrInvalidArgument", err)
	}
}

// WithFailFast on Redlock: with one node held by another Client and one
// down, no majority can agree; Lock returns the *QuorumError at once
// instead of waiting for the context (it waited to the end before).
func TestRedlockWithFailFastReturnsTheQuorumError(t *testing.T) {
	nodes := startNodes(t, 3)
	c, rdbs := newRedlock(t, nodes)
	k := key(t)
	other := dlock.New(rdbs[0])
	defer other.Close()
	held := mustLock(t, other, k, dlock.WithTTL(time.Minute))
	defer held.Unlock(ctxT(t))
	nodes[1].Kill()
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	_, err := c.Lock(ctx, k, dlock.WithFailFast(), dlock.WithNodeTimeout(time.Second))
	var qe *dlock.QuorumError
	if !errors.As(err, &qe) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Lock WithFailFast with a node held and one down: %v, want the *QuorumError before the context ends", err)
	}
}

// Every call that takes a context panics on a nil one with a message that
// says so, before it changes anything: a Lock whose Unlock or Extend was
// given nil can still be unlocked (found by review: Inspect, Revoke, Unlock
// and Extend dereferenced nil, and such an Unlock left the lock unlockable).
func TestEveryCallPanicsOnANilContextBeforeChangingAnything(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	l := mustLock(t, c, k, dlock.WithAutoRenew())
	e := c.Election(key(t))
	for name, call := range map[string]func(){
		"Inspect":         func() { _, _ = c.Inspect(nil, k) },                                     //nolint:staticcheck
		"Revoke":          func() { _, _ = c.Revoke(nil, k, dlock.Revocation{}) },                  //nolint:staticcheck
		"Attach":          func() { _, _ = c.Attach(nil, k, "t") },                                 //nolint:staticcheck
		"Do":              func() { _ = c.Do(nil, k, func(context.Context) error { return nil }) }, //nolint:staticcheck
		"Lock.Unlock":     func() { _ = l.Unlock(nil) },                                            //nolint:staticcheck
		"Lock.Extend":     func() { _ = l.Extend(nil, time.Minute) },                               //nolint:staticcheck
		"Lock.TTL":        func() { _, _ = l.TTL(nil) },                                            //nolint:staticcheck
		"Election.Leader": func() { _, _ = e.Leader(nil) },                                         //nolint:staticcheck
		"Campaign":        func() { _, _ = e.Campaign(nil, "v") },                                  //nolint:staticcheck
		"RWMutex.RLock":   func() { _, _ = c.RWMutex(key(t)).RLock(nil) },                          //nolint:staticcheck
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "dlock: nil Context") {
					t.Errorf("%s(nil, ...): %v, want a panic that names the nil Context", name, r)
				}
			}()
			call()
		}()
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock after an Unlock(nil): %v, want the lock released", err)
	}
}

// A one-node Lock whose script the node timeout cut short fails, with
// WithFailFast, with the node's error, as TryLock does: "no answer within
// the node timeout", not the caller's context's error (its context has
// not ended). (It matched context.DeadlineExceeded; found by review.)
func TestANodeTimeoutIsNotTheCallersDeadline(t *testing.T) {
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	k := key(t)
	mustLock(t, c, k+":warm").Unlock(ctxT(t))
	s.Pause()
	defer s.Resume()
	nt := dlock.WithNodeTimeout(100 * time.Millisecond)
	_, lerr := c.Lock(context.Background(), k, nt, dlock.WithFailFast())
	_, terr := c.TryLock(context.Background(), k+":try", nt)
	for name, err := range map[string]error{"Lock": lerr, "TryLock": terr} {
		var ne *dlock.NodeError
		if !errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "node timeout") {
			t.Errorf("%s: %v, want a *NodeError saying the node timeout passed", name, err)
		}
	}
}
