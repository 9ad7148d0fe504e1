package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/eviction"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The eviction policy is read alike over RESP2 and RESP3; a server that
// refuses CONFIG says so with a redis.Error, and Eviction turns that into
// a note, not a finding or a failure.
func TestTheEvictionPolicyIsReadOverEitherProtocol(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := redistest.Start(t, "--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru")
	for _, protocol := range []int{2, 3} {
		opts := s.Options()
		opts.Protocol = protocol
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		policy, limit, err := eviction.Policy(ctx, rdb)
		if err != nil || policy != "allkeys-lru" || limit != 8<<20 || !eviction.Evicts(policy, limit) {
			t.Fatalf("RESP%d: %q, %d, %v; want allkeys-lru, %d, evicting", protocol, policy, limit, err, 8<<20)
		}
		f, note, err := Eviction(ctx, rdb)
		if err != nil || note != "" || f == nil || !strings.Contains(f.Keys[0], "allkeys-lru") {
			t.Fatalf("RESP%d: finding %+v, note %q, err %v; want the eviction finding", protocol, f, note, err)
		}
	}

	rdb := s.Client(t)
	if err := rdb.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	opts := s.Options()
	opts.Username, opts.Password = "noconfig", "pw"
	limited := redis.NewClient(opts)
	defer limited.Close()
	var refused redis.Error
	if _, _, err := eviction.Policy(ctx, limited); !errors.As(err, &refused) {
		t.Fatalf("CONFIG refused: %v, want the server's error", err)
	}
	if f, note, err := Eviction(ctx, limited); f != nil || err != nil || !strings.Contains(note, "could not check the eviction policy") {
		t.Fatalf("CONFIG refused: finding %+v, note %q, err %v; want only the note", f, note, err)
	}

	if eviction.Evicts("noeviction", 8<<20) || eviction.Evicts("allkeys-lru", 0) {
		t.Fatal("noeviction, or no memory limit, evicts nothing")
	}
}
