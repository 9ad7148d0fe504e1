package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestZZCloseWithPausedNodes(t *testing.T) {
	s1, s2, s3 := redistest.Start(t), redistest.Start(t), redistest.Start(t)
	c := dlock.New(s1.Client(t), s2.Client(t), s3.Client(t))
	ctx := context.Background()
	l, err := c.Lock(ctx, "zz")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	s2.Pause()
	s3.Pause()
	defer s2.Resume()
	defer s3.Resume()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Lock(cctx, "zz")
	cancel()
	t.Logf("Lock: %v after %v", err, time.Since(start))
	start = time.Now()
	c.Close()
	t.Logf("Close: %v", time.Since(start))
}
