package dlock

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryAnswerGoesToTheCallerOrToLateExactlyOnce(t *testing.T) {
	c := &Client{} // spawn needs nothing else
	var toCaller, toLate atomic.Int64
	for range 500 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(rand.N(200 * time.Microsecond)); cancel() }()
		_, _, left := await(ctx, c, 0, func(context.Context) (int, error) {
			time.Sleep(rand.N(200 * time.Microsecond))
			return 1, nil
		}, func(int, error) { toLate.Add(1) })
		if !left {
			toCaller.Add(1)
		}
		cancel()
	}
	c.waitIdle(false)
	if got := toCaller.Load() + toLate.Load(); got != 500 {
		t.Fatalf("%d answers to the caller and %d to late: %d, want 500", toCaller.Load(), toLate.Load(), got)
	}
}

func TestAWaitEndsOnceEnoughHaveAnsweredAndTheRestGoLate(t *testing.T) {
	c := &Client{}
	release := make(chan struct{})
	ops := []func(context.Context) (int, error){
		func(context.Context) (int, error) { return 1, nil },
		func(context.Context) (int, error) { <-release; return 2, nil },
		func(context.Context) (int, error) { return 3, nil },
	}
	late := make(chan int, 3)
	cs := startCalls(context.Background(), c, ops, func(i int, _ int, _ error) { late <- i })
	got, why := cs.wait(context.Background(), 3, 0, func(got []reply[int]) bool { return len(got) == 2 })
	if why != nil || len(got) != 2 {
		t.Fatalf("got %v (%v), want the two quick answers", got, why)
	}
	close(release)
	if i := <-late; i != 1 {
		t.Fatalf("late got answer %d, want 1", i)
	}
	c.waitIdle(false)
}

func TestAWaitThatTimesOutSaysSo(t *testing.T) {
	c := &Client{}
	release := make(chan struct{})
	defer close(release)
	_, err, left := await(context.Background(), c, time.Millisecond, func(context.Context) (int, error) {
		<-release
		return 0, nil
	}, nil)
	if !left || err != errNodeTimeout {
		t.Fatalf("left %v, err %v; want left with errNodeTimeout", left, err)
	}
}
