package gate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Limit lets callers through below Max, holds them at Max until work is
// done, and lets a held caller go when its context ends.
func TestLimitHoldsNewcomersAtItsMax(t *testing.T) {
	l := &Limit{Max: 2}
	ctx := context.Background()
	l.Add(1)
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("below Max: %v", err)
	}
	l.Add(1)
	if l.Below() {
		t.Fatal("at Max, Below says below")
	}
	through := make(chan error, 1)
	go func() { through <- l.Wait(ctx) }()
	select {
	case err := <-through:
		t.Fatalf("at Max, let through: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	l.Add(-1)
	select {
	case err := <-through:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still held once below Max")
	}
	l.Add(1)
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := l.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("at Max with a context that ends: %v", err)
	}
}
