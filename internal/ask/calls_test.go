package ask

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryAnswerGoesToTheCallerOrToLateExactlyOnce(t *testing.T) {
	w := &Work{} // Spawn needs nothing else
	var toCaller, toLate atomic.Int64
	for range 500 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(rand.N(200 * time.Microsecond)); cancel() }()
		_, _, left := await(ctx, w, 0, func(context.Context) (int, error) {
			time.Sleep(rand.N(200 * time.Microsecond))
			return 1, nil
		}, func(int, error) { toLate.Add(1) })
		if !left {
			toCaller.Add(1)
		}
		cancel()
	}
	w.Wait()
	if got := toCaller.Load() + toLate.Load(); got != 500 {
		t.Fatalf("%d answers to the caller and %d to late: %d, want 500", toCaller.Load(), toLate.Load(), got)
	}
}

func TestAWaitEndsOnceEnoughHaveAnsweredAndTheRestGoLate(t *testing.T) {
	w := &Work{}
	release := make(chan struct{})
	ops := []func(context.Context) (int, error){
		func(context.Context) (int, error) { return 1, nil },
		func(context.Context) (int, error) { <-release; return 2, nil },
		func(context.Context) (int, error) { return 3, nil },
	}
	late := make(chan int, 3)
	cs := startCalls(context.Background(), w, ops, func(i int, _ int, _ error) { late <- i })
	got, why := cs.wait(context.Background(), 3, 0, func(got []Reply[int]) bool { return len(got) == 2 })
	if why != nil || len(got) != 2 {
		t.Fatalf("got %v (%v), want the two quick answers", got, why)
	}
	close(release)
	if i := <-late; i != 1 {
		t.Fatalf("late got answer %d, want 1", i)
	}
	w.Wait()
}

func TestAWaitThatTimesOutSaysSo(t *testing.T) {
	w := &Work{}
	release := make(chan struct{})
	defer close(release)
	_, err, left := await(context.Background(), w, time.Millisecond, func(context.Context) (int, error) {
		<-release
		return 0, nil
	}, nil)
	if !left || err != ErrNodeTimeout {
		t.Fatalf("left %v, err %v; want left with ErrNodeTimeout", left, err)
	}
}
