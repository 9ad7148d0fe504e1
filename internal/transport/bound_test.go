package transport

import (
	"testing"
	"time"
)

// The pipeline's waits share a bounding context for a second at most: each
// ends between the bound and the bound plus a second after it began.
func TestPipelinedWaitsShareTheirBound(t *testing.T) {
	var s sharedBound
	bound := 50 * time.Millisecond
	start := time.Now()
	a := s.get(bound)
	if b := s.get(bound); b != a && time.Since(start) < 500*time.Millisecond {
		t.Fatal("two waits begun together got different bounds")
	}
	deadline, ok := a.Deadline()
	if !ok || deadline.Before(start.Add(bound)) || deadline.After(time.Now().Add(bound+time.Second)) {
		t.Fatalf("deadline %v after the wait began, want within [%v, %v]", deadline.Sub(start), bound, bound+time.Second)
	}
	time.Sleep(time.Until(deadline.Add(-bound / 2))) // less than the bound is left
	next := s.get(bound)
	if next == a {
		t.Fatal("a wait got a bound with less than the bound left")
	}
	if d, _ := next.Deadline(); time.Until(d) < bound/2 {
		t.Fatalf("the new bound ends in %v", time.Until(d))
	}
	<-a.Done() // the shared context ends by its deadline
}
